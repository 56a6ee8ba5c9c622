// Package engine will compile dsl flows into topology and handlers, wrap
// every step in the same middleware (tracing, metrics, idempotency keyed by
// run id and step, ordering, timeout, retry policy), run workers, record
// each run in the run journal and export metrics.
package engine
