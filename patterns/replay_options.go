package patterns

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// ReplayOption configures Replay.
type ReplayOption func(*replayConfig) error

type replayConfig struct {
	filter   func(broker.Envelope, []byte) bool
	exchange string
	key      string
	destSet  bool
	limit    int
	deadline time.Time
	restart  bool
	progress func(ReplayResult)
	inFlight int
	discard  bool
}

// DefaultReplayInFlight is how many copies Replay has waiting for the
// broker's confirm at once: enough to reach thousands of messages a second,
// where waiting for each confirm in turn manages a few hundred.
const DefaultReplayInFlight = 64

// ReplayFilter moves only the messages f accepts; f sees each message's
// envelope (engine headers as typed fields, read leniently: a malformed one
// reads as its zero value) and its body as stored. Declined messages are
// held for the pass and then returned, in order. Default: every message.
func ReplayFilter(f func(env broker.Envelope, body []byte) bool) ReplayOption {
	return func(c *replayConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil replay filter", broker.ErrInvalidOption)
		}
		c.filter = f
		return nil
	}
}

// ReplayTo publishes the copies to exchange with routing key (default: the
// default exchange, with each message's x-acemq-queue as the key, or its
// x-first-death-queue when the broker dead-lettered it itself: back where
// it came from). The default exchange with no routing key is
// refused: it would address the dead-letter queue itself, and loop.
func ReplayTo(exchange, routingKey string) ReplayOption {
	return func(c *replayConfig) error {
		if exchange == "" && routingKey == "" {
			return fmt.Errorf("%w: replay through the default exchange needs a routing key (the queue to replay to)", broker.ErrInvalidOption)
		}
		c.exchange, c.key, c.destSet = exchange, routingKey, true
		return nil
	}
}

// ReplayLimit stops after n messages were moved (or discarded, with
// ReplayDiscard); 0, the default, is no limit: against a queue somebody is
// still writing to, that may mean never stopping. A negative n is refused.
func ReplayLimit(n int) ReplayOption {
	return func(c *replayConfig) error {
		if n < 0 {
			return fmt.Errorf("%w: replay limit %d, want 0 or more", broker.ErrInvalidOption, n)
		}
		c.limit = n
		return nil
	}
}

// ReplayDeadline stops reading at t; the replay ends normally with reason
// deadline (the zero time, the default, is no deadline).
func ReplayDeadline(t time.Time) ReplayOption {
	return func(c *replayConfig) error { c.deadline = t; return nil }
}

// ReplayRestart says whether a copy goes back on attempt 1 with
// x-acemq-error cleared (true, the default: anything else would have the
// consumer give up on it again before its handler runs), or exactly as it
// was (false: for an audit, or for a reader that counts attempts itself).
func ReplayRestart(restart bool) ReplayOption {
	return func(c *replayConfig) error { c.restart = restart; return nil }
}

// ReplayProgress calls f with the counts so far after every message moved
// or skipped, one call at a time, so that a tool can show progress. f must
// return quickly: the replay waits for it.
func ReplayProgress(f func(ReplayResult)) ReplayOption {
	return func(c *replayConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil replay progress callback", broker.ErrInvalidOption)
		}
		c.progress = f
		return nil
	}
}

// ReplayInFlight sets how many copies may await their confirm at once
// (default DefaultReplayInFlight). 1 keeps the copies in exactly the order
// they were read, at a fraction of the speed. n must be at least 1.
func ReplayInFlight(n int) ReplayOption {
	return func(c *replayConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: replay in-flight %d, want at least 1", broker.ErrInvalidOption, n)
		}
		c.inFlight = n
		return nil
	}
}

// ReplayDiscard acknowledges the messages the filter accepts without
// copying them anywhere: what a dead-letter queue holds that no longer
// needs a person (a run compensated since, say). They are gone once the
// pass has read them, and counted as Discarded. It cannot be combined with
// ReplayTo.
func ReplayDiscard() ReplayOption {
	return func(c *replayConfig) error { c.discard = true; return nil }
}
