package storetest

import (
	"context"
	"testing"
	"time"
)

// Durations of the suites.
const (
	// short is a lease or retention a test waits out. What a test checks
	// right after taking one (still held, still kept) must happen within
	// it, so it leaves a loaded machine a few hundred milliseconds.
	short = 300 * time.Millisecond
	// long is a lease or retention no test outlives.
	long = 10 * time.Minute
	// runOut bounds the wait for a short one to run out.
	runOut = 5 * time.Second
	// poll is how often a test looks whether it has.
	poll = 10 * time.Millisecond
)

// run runs tests in parallel, each handed open.
func run[O any](t *testing.T, open O, tests map[string]func(*testing.T, O)) {
	t.Helper()
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open)
		})
	}
}

// ctxOf bounds one test's calls.
func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
