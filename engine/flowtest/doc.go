// Package flowtest runs flows in a test on a clock the test moves, so that
// a 30-minute delay, an hour's hold for replay or a ladder of retries
// minutes apart passes at once, the way River's rivertest and Temporal's
// test environment let a test of a workflow skip time.
//
//	func TestPlaceOrder(t *testing.T) {
//		env := flowtest.New(t, orders.PlaceOrder) // an engine and a worker on a broker of their own
//		run := env.Start(orders.Order{ID: "o-1", ShipAt: env.Now().Add(30 * time.Minute)})
//		env.RunUntil(run, journal.Completed)      // skips the 30 minutes
//		require.Equal(t, []string{"start::started", ..., "delay:ship:waiting", "step:ship:completed"}, env.Outcomes(run))
//	}
//
// # What an Env is
//
// [New] starts, for the flows it is given, an engine and a worker on the
// in-process broker (the loopback, as memory:// is) with a clock of the
// Env's own: broker.Config.Clock on the connection and
// loopback.NewWithClock under it. That clock stands still. Everything
// that decides when something happens reads it: a delay's due time, a
// hold's end, the scheduler ladder's rungs (their TTLs expire on it),
// retry delays and max ages, put-backs, cancellation margins, cron ticks,
// and every time the journal records, so that a timeline reads in the
// flow's time: a step after a 30-minute delay starts 30 minutes (and at
// most a second, the ladder's accuracy) after the delay began.
//
// # Moving the clock
//
// The test moves it. [Env.Advance] moves it by a duration, firing on the
// way every timer due (a rung expiring, a cron tick), in order, with the
// clock at the timer's time, and lets the system settle before the next.
// [Env.RunUntil] skips time until a run reaches a status: it lets the
// system settle, looks at the run, and moves the clock to the next timer,
// however far ahead, for as long as the run is elsewhere; it fails the
// test, with the run's timeline, once nothing is left to happen. Neither
// waits any real time for a delay: a test of a 30-minute delay takes
// milliseconds.
//
// # Settled, and what it cannot see
//
// The system has settled ([Env.Settle]) when no delivery is unsettled on
// the broker (loopback.Broker.Stats), none is in the hands of a consumer
// of the Env's connection, its settle hook included (broker.Conn.InFlight),
// no delivery was made while it looked, and the journal has every event
// recorded so far. A ready message in a queue nobody consumes (a
// dead-letter queue, a rung of the ladder) is settled: only a client or a
// timer moves it. What the Env cannot see is work that is none of these:
// a goroutine a step starts and does not wait for, a service of the flow
// that keeps its own time (give it [Env.Now]), and the engine's own
// background passes that keep real time: the tidier that takes a
// compensated run's message out of its dead-letter queue (about a second
// later, in real time), the worker's housekeeping, and the idempotency
// store's window and claim leases (package patterns), which measure a
// process's liveness rather than a flow's time.
//
// An Env's methods fail the test instead of returning errors, and are for
// the test's goroutine. Everything an Env starts stops when the test ends.
//
// The clock only works with the loopback: RabbitMQ expires the ladder's
// messages on its own clock, and broker.Config.Open refuses a Clock with
// an amqp:// URL. A test of a flow on RabbitMQ waits real time.
package flowtest
