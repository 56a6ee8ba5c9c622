// Package storetest is the conformance suite every implementation of the
// pattern stores passes: the in-memory stores of package patterns and the
// PostgreSQL ones of package persistence run the same tests, so that a
// worker behaves the same whichever store it is given.
//
//   - [Idempotency] checks a [patterns.ResultStore] (and, when the store is
//     one, a [patterns.TxStore]): claims, confirmations, forgetting,
//     leases, retention and kept results.
//   - [Outbox] checks an outbox store with every interface the relay uses
//     ([OutboxStore]): claiming as a lease, order, releasing, counting
//     refused attempts, and a relay over the store.
//   - [Schemas] checks a [patterns.SchemaRegistry].
//
// Each suite takes a function that opens the stores of one test on
// something empty of their own; every test runs in parallel. What an
// implementation cannot do (share keys between instances, join a
// transaction) it says by leaving the matching field nil, and the rules
// that need it are skipped with a message naming the field.
//
// Time-dependent rules (leases, retention) open stores with a lease of a
// few hundred milliseconds and poll for it to run out, so the suites take
// about a second whatever they run against.
package storetest
