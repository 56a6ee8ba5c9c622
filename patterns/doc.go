// Package patterns will hold every pattern of the AceMQ seeds (idempotency,
// outbox relay, request/reply, replay, ordering, consumer groups, routing
// slips, pipelines, sagas, the scheduler, claim check, streams and schema
// registries), each written against broker's public API only, together
// with their store interfaces and in-memory implementations of them.
package patterns
