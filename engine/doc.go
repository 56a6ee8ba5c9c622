// Package engine runs the flows of package dsl on RabbitMQ: it compiles a
// flow to topology and handlers on what package patterns already knows how
// to run, starts runs, works their steps in workers, records every run in
// the run journal and exports metrics.
//
//	eng, err := engine.New(engine.Config{Conn: conn, Journal: j})
//	err = eng.Register(workflows.PlaceOrder)
//	runID, err := eng.Start(ctx, "place-order", order)
//	w, err := eng.StartWorker(ctx)   // or eng.Run(ctx): until ctx ends
//	defer w.Close(ctx)
//
// Without a Journal and a Store the engine keeps runs and step claims in
// its process's memory. Workers sharing a PostgreSQL database take theirs
// from package enginepg, which opens the journal, the idempotency store and
// the cron guard in one call:
//
//	stores, err := enginepg.Open(ctx, databaseURL, enginepg.Config{Migrations: enginepg.ApplyMigrations})
//	eng, err := engine.New(stores.Engine(engine.Config{Conn: conn}))
//
// # What a flow becomes
//
// A flow of fixed steps is a declared pipeline: exchange <flow> (direct),
// a queue <flow>.<step> per step (with its .dlq and .parked) bound under
// the step's name, and messages carrying x-acemq-route, so that a Java or
// Ruby AceMQ service can serve an External step. A flow with an Itinerary
// travels as a routing slip (acemq-routing-slip). When is decided at the
// hop: the position jumps past skipped steps, which the run records. A
// delay sends the hop through the scheduler ladder (the run shows as
// waiting until then). A compensable step gets a compensation queue,
// <flow>.compensate.<step>.
//
// # A step, and what keeps it from running twice
//
// Every step, and every compensation, is a unit of patterns.Once, the
// executor of work that must happen once: claimed under its key (run id,
// replay, position, step), run (in the store's database transaction when
// it is Transactional) under a span, metrics and the step's timeout, what
// it produced kept under the key, carried out (its next message sent, what
// its compensation will need put in the journal), and the key confirmed
// once the journal has the outcome. A redelivery after a lost confirm or a
// dead connection carries out what was kept, the same message again,
// instead of running the step a second time; a next message that could not
// be sent shows as "hop failed" in the timeline, and its retry sends it.
// A delivery's engine headers are read once, and what its handler found
// out travels with its Ack (broker.Ack.With) to the consumer's
// BeforeSettle function and settle hook, which record it.
//
// # Compensation
//
// When a step is given up (its retries spent, or broker.Fatal), the
// completed steps that have a Compensate are compensated in reverse order,
// as messages with their own retries: any worker can do it and a restart
// does not forget it. What each compensation needs travels with the run's
// messages (the acemq-flow-run header), so it works without a database; a
// result too large for a header is kept in the journal (journal.DataStore)
// and the header refers to it. A step whose effect happened before the run
// was given up (its next message refused by the broker) is compensated with
// the rest. A compensation that is given up leaves the run unresolved:
// logged at error, counted, and listed. A flow with dsl.HoldForReplay keeps
// a failed run waiting for a replay instead, and compensates it only if
// nobody replayed it in time. A run being compensated leaves nothing in a
// dead-letter queue: those hold what needs a person.
//
// # The journal
//
// Every step attempt's final outcome (heard from the consumer's settle
// hook, not guessed inside the handler), every skip, delay, compensation
// and replay is recorded in the run journal (package journal), off the hot
// path in batches and never dropped.
//
// # Time
//
// The engine reads the time from its connection's clock
// (broker.Config.Clock, the system's unless a test gives one): a delay's
// due time, a hold's end, the start of a run started In a duration,
// whether a wait can still be cancelled, cron ticks, and every time the
// journal records, so that a run's timeline reads in the time its flow
// saw. Step durations and timeouts stay in real time, as do the worker's
// own pacing (housekeeping, the tidier) and the idempotency store's
// leases. Package flowtest runs flows on a clock the test moves, so that
// a delay or a hold of hours passes at once.
//
// # Metrics
//
// Given a MeterProvider (Config.MeterProvider), the engine records the
// seeds' acemq.pipeline.run.total and acemq.pipeline.run.duration, and
// acemq.flow.step.duration, acemq.flow.steps.active,
// acemq.flow.compensation.total and acemq.flow.runs.started. Its duration
// histograms use DurationBuckets (from 100 µs: a step takes microseconds).
// A run is counted as started by the worker whose first step takes it up
// (its first message, on attempt 1, not a replay, claimed), not by the
// process that started it, so that a worker's /metrics shows the runs
// started by `acemq-flow start` or by another service.
//
// Long-lived settings are a Config struct (zero value = defaults);
// per-call knobs are functional options (StartOption).
package engine
