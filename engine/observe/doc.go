// Package observe is a worker's HTTP endpoint for the machines that watch
// it: /metrics in the Prometheus text format, /healthz (the process is
// alive) and /readyz (it can do its work now).
//
// # Metrics
//
// [NewMetrics] builds an OpenTelemetry MeterProvider whose reader is the
// OpenTelemetry Prometheus exporter, on a registry of its own (never the
// global one), with the UnderscoreEscapingWithSuffixes translation strategy
// spelled out: acemq.consume.total is served as acemq_consume_total, a
// histogram in seconds gains _seconds, and a counter _total; no series
// carries otel_scope_* labels (the exporter's WithoutScopeInfo). Give its
// MeterProvider to the broker connection and to the engine, and every
// acemq.* and messaging.* instrument they record is served:
//
//	m, err := observe.NewMetrics(observe.MetricsConfig{})
//	conn, err := broker.Config{MeterProvider: m.MeterProvider()}.Open(ctx, url)
//	eng, err := engine.New(engine.Config{Conn: conn, MeterProvider: m.MeterProvider()})
//	err = m.ObserveLadder(conn)  // acemq.schedule.* from conn.LadderStats
//	err = m.ObserveFlows(eng)    // acemq.queue.depth of every flow queue, dead-letter queues included
//	err = m.ObserveReadiness(observe.BrokerCheck(conn), gate.Check()) // acemq.worker.ready{check}
//
// A histogram is served with the buckets its instrument asked for: the
// broker's (acemq.consume.duration, messaging.process.duration, ...) with
// [broker.DurationBuckets], the messaging conventions' suggestion, and the
// engine's (acemq.flow.step.duration, acemq.pipeline.run.duration) with
// [engine.DurationBuckets], from 100 µs, since steps take microseconds. A
// histogram whose instrument asked for none gets [engine.DurationBuckets]
// rather than the SDK's defaults, which are for milliseconds.
//
// # Health
//
// [NewServer] serves the three paths. Readiness is a list of [Check]s run
// on each request, each a func(context.Context) error so that this package
// does not need to know a database driver: [BrokerCheck] (the connection
// is open, its consumers run and the broker answers), a [WorkerGate]'s
// check (the worker started and every one of its consumers runs), and, for
// a worker with a database, a check its caller writes (pool.Ping). A
// failing check makes /readyz answer 503 with every check's result as
// text.
//
// [ListenAndServe] serves any handler on an address until its context
// ends, then shuts the server down: what a command does with --metrics-addr.
//
//	srv, err := observe.NewServer(observe.ServerConfig{Metrics: m, Checks: []observe.Check{observe.BrokerCheck(conn), gate.Check()}})
//	go func() { errc <- observe.ListenAndServe(ctx, "127.0.0.1:9464", srv) }()
//	w, err := eng.StartWorker(ctx)
//	gate.Set(w) // ready from now on
//
// Long-lived settings are Config structs whose zero values are defaults.
package observe
