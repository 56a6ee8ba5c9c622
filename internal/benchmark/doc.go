// Package benchmark measures acemq-flow against its baselines on one
// broker, in one run: what `acemq-flow bench` prints, and what the go test
// benchmarks of engine, persistence and patterns report (they call the
// measurements here, so that the command and the benchmarks measure the
// same thing).
//
// Each scenario is a function taking a context and a [Config] and returning
// typed [Result] values, each a figure of the project beside its baseline
// measured just before or after it on the same broker:
//
//   - [Core]: confirmed publish and acknowledged consume through package
//     broker against plain amqp091-go;
//   - [Flow]: runs/s and run latency of a 3-step flow against a plain
//     consume-republish-ack chain (bare, and carrying the AceMQ envelope),
//     and with the run journal on PostgreSQL against in memory;
//   - [Ladder]: how late delayed messages arrive through the scheduler
//     ladder, against one fixed-TTL queue dead-lettering to the destination;
//   - [Outbox]: outbox relay records/s against publishing the same records
//     without the database;
//   - [Request]: request/reply req/s and latency at 16 callers against a
//     plain amqp091-go requester and responder.
//
// [Run] runs the scenarios a [Config] selects and gathers a [Report].
// Every queue, exchange and table a measurement declares has a name of its
// own, starting with the run's prefix ([Config.ID]), and is deleted when
// the measurement ends, also when it fails or its context is cancelled.
//
// The baselines written with amqp091-go need RabbitMQ: on the embedded
// broker (memory://) those figures have no baseline. CPU is this process's
// user and system time (getrusage), divided by the messages the
// measurement moved; on the embedded broker it includes the broker's own.
package benchmark
