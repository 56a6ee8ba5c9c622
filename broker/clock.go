package broker

import "time"

// Clock is where a connection reads the time (Config.Clock): the system's
// clock in production, a clock a test moves by hand so that a delay of
// hours passes at once (package engine/flowtest). Its method set is
// loopback.Clock's, so one value serves both.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f, once, when d has passed on the clock (as
	// time.AfterFunc does, on a goroutine of its own; a clock a test moves
	// by hand may call it on the goroutine that moves it, and wait for
	// it), and returns a function that cancels the call: true if it did,
	// false if f has already been called or cancelled.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the machine's clock: time.Now and time.AfterFunc.
type SystemClock struct{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc; stop is the timer's Stop.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// errClockOnRabbitMQ refuses a Clock of the caller's with RabbitMQ, which
// expires the ladder's messages on its own clock.
var errClockOnRabbitMQ = invalid("a Clock with RabbitMQ: the broker expires the ladder's messages on its own clock, which no client can move; a clock of your own works with memory:// only")
