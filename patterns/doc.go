// Package patterns is every pattern of the AceMQ seeds, written against
// broker's public API only: nothing here reaches into the core, which is
// the test that the core's API is wide enough. Most patterns wrap a
// [broker.Handler] and hand back a handler, so the consumer's retry
// policy, dead-lettering and envelope stay whatever was configured.
//
// Long-lived things take their settings when built ([NewScheduler],
// [NewPipeline], [NewSaga]); per-call knobs are functional options
// ([FollowOption], and broker's publish options for destinations).
//
// # Routing slips and declared pipelines
//
// A [RoutingSlip] is an itinerary that travels with a message in the
// acemq-routing-slip header; a [Pipeline] is a route declared once that
// messages travel by name (x-acemq-route). [FollowSlip] and
// [Pipeline.Follow] run one step and hop the result on as a new message,
// published mandatory and confirmed before the input is accepted; they
// read either form and write the one the message arrived in unless
// [Write] says otherwise. [SlipFrom] reads where a run got to, from a
// live message or a dead letter.
//
// # Sagas
//
// A [Saga] runs steps in-process and, when one fails, the compensations
// of those that completed in reverse; [SagaResult] says what happened.
//
// # Scheduling
//
// A [Scheduler] delivers a message later on the connection's scheduler
// ladder: never early, about a second late at most.
//
// # Ordering and partitions
//
// [Ordered] and [WithOrdering] handle messages with the same key one at
// a time while different keys run concurrently; [Partition] and
// [PartitionedRoutingKey] spread keys over queues the same way in every
// AceMQ library.
//
// # Middleware
//
// [Chain] composes middleware, first named outermost; [WithLogging],
// [WithTimeout] and [ThenPublish] are the seed's step middleware and
// service chaining.
//
// # Also here
//
// Idempotency guards, the transactional outbox and its relay, schema
// registries, replay of dead-lettered messages, request and reply,
// consumer groups, the claim check codec and streams.
//
// # Errors
//
// Errors wrap sentinels for errors.Is and typed errors for errors.As:
// [ErrInvalidSlip], [ErrNoSlip], [ErrUnknownStep], [ErrNoPipeline],
// [ErrInvalidSaga], [ErrHandlerTimeout], [*SagaError], and
// [broker.ErrInvalidOption] for arguments a constructor refuses.
package patterns
