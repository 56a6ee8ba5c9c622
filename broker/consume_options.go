package broker

import (
	"context"
	"log/slog"
	"regexp"
	"time"
)

// ConsumeOption is a per-call knob of Consume.
type ConsumeOption interface {
	applyConsume(*consumeConfig) error
}

type consumeConfig struct {
	prefetch        int
	concurrency     int
	retry           RetryPolicy
	codecs          codecs
	tag             string
	declare         bool
	exclusive       bool
	inProgressDelay time.Duration
	middleware      []Middleware
	args            Table
	resumeArgs      func() Table
	stream          bool
	retrySet        bool
	orderBy         func(*Message) string
	onSettle        func(context.Context, Settlement)
	beforeSettle    func(context.Context, *Message, Ack) Ack
	logger          *slog.Logger
	setAsideLevel   slog.Level
	setAsideLevelOK bool
}

// setAsideLogLevel is the level of the line written per message set
// aside: slog.LevelWarn unless SetAsideLogLevel said otherwise.
func (c *consumeConfig) setAsideLogLevel() slog.Level {
	if c.setAsideLevelOK {
		return c.setAsideLevel
	}
	return slog.LevelWarn
}

type consumeOpt func(*consumeConfig) error

func (f consumeOpt) applyConsume(c *consumeConfig) error { return f(c) }

// Prefetch sets how many unsettled deliveries the broker hands the consumer
// at once (default 20). n must be at least 1: a prefetch of 0 means
// "unlimited" to RabbitMQ, which is how a consumer runs out of memory.
func Prefetch(n int) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if n < 1 {
			return invalid("prefetch %d, want at least 1", n)
		}
		c.prefetch = n
		return nil
	})
}

// Concurrency sets how many handlers run at once on the consumer (default
// 1). Above one, messages are no longer handled in queue order.
func Concurrency(n int) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if n < 1 {
			return invalid("concurrency %d, want at least 1", n)
		}
		c.concurrency = n
		return nil
	})
}

// WithRetry sets the retry policy (default: the connection's, itself
// DefaultRetry unless configured).
func WithRetry(p RetryPolicy) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if err := p.Validate(); err != nil {
			return err
		}
		c.retry = p
		c.retrySet = true
		return nil
	})
}

// Tag sets the consumer tag the broker knows the consumer by.
func Tag(name string) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error { c.tag = name; return nil })
}

// Existing consumes a queue somebody else declared, without declaring it or
// its .dlq and .parked. Giving up on a message whose .dlq does not exist
// falls back to the queue's own dead-lettering.
func Existing() ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error { c.declare = false; return nil })
}

// Exclusive asks to be the queue's only consumer.
func Exclusive() ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error { c.exclusive = true; return nil })
}

// Use wraps the handler in middleware; the first named is the outermost.
func Use(mws ...Middleware) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		for i, m := range mws {
			if m == nil {
				return invalid("middleware %d is nil", i)
			}
		}
		c.middleware = append(c.middleware, mws...)
		return nil
	})
}

// OnStream consumes a stream queue (declared with x-queue-type stream; see
// patterns.DeclareStream), where nothing can be moved back: the queue is not
// declared, the retry policy is NoRetry unless WithRetry says otherwise, an
// InProgress answer dead-letters instead of putting back, and a delivery is
// never rejected (RabbitMQ closes the connection on a nack to a stream): one
// that cannot be set aside is acknowledged, logged and counted as
// outcome="skipped", because a stream moves on regardless.
func OnStream() ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		c.stream = true
		c.declare = false
		return nil
	})
}

// OrderBy handles messages with the same key one at a time, in the order
// the queue delivered them, while messages with different keys run
// concurrently (up to Concurrency). A message whose key is "" is not
// ordered against anything. Only the consumer knows the delivery order, so
// this is the option to reach for when a later message about the same thing
// must not overtake an earlier one at a concurrency above one; see also
// patterns.OrderedBy. Across consumers and processes, ordering is a routing
// decision (patterns.PartitionedRoutingKey).
func OrderBy(key func(*Message) string) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if key == nil {
			return invalid("nil ordering key")
		}
		c.orderBy = key
		return nil
	})
}

// Settlement is what became of one delivery, once its consumer settled it:
// the final outcome, decided after every middleware returned, which a
// handler cannot know from inside (a retry whose policy is spent becomes a
// dead letter; a move the broker refused becomes a reject).
type Settlement struct {
	// Queue is the queue the delivery came from.
	Queue string
	// Message is the delivery as its handler saw it, or nil when it could
	// not be read (then Outcome is parked and Err says why).
	Message *Message
	// MessageID is the delivery's message id, also when Message is nil.
	MessageID string
	// RunID is the delivery's x-acemq-run-id, also when Message is nil
	// (read on its own then: "" when it is absent or itself unreadable),
	// so that a run whose message was parked can still be told.
	RunID string
	// Outcome is what the consumer did: OutcomeLabelAccepted,
	// OutcomeLabelRetried, OutcomeLabelDeadLettered, OutcomeLabelParked,
	// OutcomeLabelInProgress (put back), OutcomeLabelUnsettled (the move or
	// the ack did not complete: the broker redelivers it) or
	// OutcomeLabelSkipped (a stream message acknowledged past).
	Outcome string
	// Label is the outcome the handler asked to be reported under
	// (Ack.As, "duplicate" for the idempotency guard), or "".
	Label string
	// HandlerRan is false when the delivery was parked or given up before
	// its handler was called (unreadable, or its retries already spent).
	HandlerRan bool
	// Note is what the handler (or the BeforeSettle function) attached to
	// its Ack with Ack.With; nil when it attached nothing or never ran.
	Note any
	// Err is the handler's reason (Retry, Reject), or why the delivery was
	// set aside before the handler ran; nil for an accept.
	Err error
	// Reason is the x-acemq-error text of a dead-lettered or parked copy.
	Reason string
	// Delay is how long until a retried or put-back message comes back,
	// and NextAttempt the attempt it will arrive on.
	Delay       time.Duration
	NextAttempt int
	// Started is when the consumer took the delivery; Duration how long it
	// took to settle it.
	Started  time.Time
	Duration time.Duration
}

// OnSettle calls f with the final outcome of every delivery, after it was
// settled (so a message retried, dead-lettered or parked is already on its
// way), on the goroutine that handled it: a slow f slows the consumer
// down rather than queueing without bound. f must not block for long and
// must not settle the message itself. A nil f is refused.
func OnSettle(f func(ctx context.Context, s Settlement)) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if f == nil {
			return invalid("nil settle hook")
		}
		c.onSettle = f
		return nil
	})
}

// LogTo writes the consumer's log lines (a message set aside, a retry, a
// put-back, an ack that failed, the consumer ending) to l rather than to
// the connection's logger: a logger carrying what the consumer is for
// (the engine's carries the flow and the step) makes every line say it.
// Each line carries the queue, the message id and, when the message names
// one, its run id (run_id). A nil l is refused.
func LogTo(l *slog.Logger) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.logger = l
		return nil
	})
}

// SetAsideLogLevel is the level of the line the consumer writes for each
// message it dead-letters or parks ("message set aside"): slog.LevelWarn
// by default, since a message given up is what an operator looks for. An
// owner that writes its own line for each (the engine's "step given up")
// passes slog.LevelDebug, so that one give-up is one line at WARN.
func SetAsideLogLevel(l slog.Level) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		c.setAsideLevel, c.setAsideLevelOK = l, true
		return nil
	})
}

// BeforeSettle calls f once the handler (with its middleware) has returned
// and before the delivery is settled, and settles it with the Ack f
// returns: for work that must be done before the broker hears of the
// outcome but need not hold a handler, such as waiting for a journal
// write to commit. f runs off the handler's slot, so the consumer's
// workers go on with the next deliveries meanwhile; at most Prefetch
// deliveries are ever unsettled, so at most that many wait in f at once.
// With OrderBy, f runs on the worker, before the key's next message is
// released; without it, the settle hook (OnSettle) may hear deliveries in
// another order than their handlers ran. A panic in f retries the delivery, as a handler's does. Cancel
// waits for f as for a handler, and cancels its ctx at the deadline. A nil
// f is refused.
func BeforeSettle(f func(ctx context.Context, m *Message, ack Ack) Ack) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if f == nil {
			return invalid("nil before-settle function")
		}
		c.beforeSettle = f
		return nil
	})
}

// ConsumeArgs sets basic.consume arguments (x-stream-offset on a stream).
// resume, when not nil, supplies them for each resubscription after a
// reconnect instead. An x-stream-offset RabbitMQ would not take (it closes
// the whole connection on one) is refused: it must be "first", "last",
// "next", an interval such as "7D" or "30m", an offset of 0 or more, or a
// time.Time.
func ConsumeArgs(args Table, resume func() Table) ConsumeOption {
	return consumeOpt(func(c *consumeConfig) error {
		if err := args.Validate(); err != nil {
			return err
		}
		if v, ok := args[HeaderStreamOffset]; ok {
			if err := checkStreamOffset(v); err != nil {
				return err
			}
		}
		c.args = args
		c.resumeArgs = resume
		return nil
	})
}

// CodecOption selects a codec; it works for Publish (encode with it) and for
// Consume (decode its content type with it).
type CodecOption struct{ codec Codec }

// WithCodec encodes a publish with c, or decodes c's content type with c on
// a consumer (a claim-check codec wrapping JSON, say).
func WithCodec(c Codec) CodecOption { return CodecOption{codec: c} }

func (o CodecOption) applyPublish(c *publishConfig) error {
	if o.codec == nil {
		return invalid("nil codec")
	}
	c.codec = o.codec
	return nil
}

func (o CodecOption) applyConsume(c *consumeConfig) error {
	if o.codec == nil {
		return invalid("nil codec")
	}
	c.codecs = c.codecs.with(o.codec)
	return nil
}

// streamInterval is the form of an x-stream-offset interval: a count and
// one of RabbitMQ's units (years, months, days, hours, minutes, seconds).
var streamInterval = regexp.MustCompile(`^[0-9]+[YMDhms]$`)

// checkStreamOffset refuses an x-stream-offset value RabbitMQ would not take.
func checkStreamOffset(v any) error {
	switch o := v.(type) {
	case string:
		if o == "first" || o == "last" || o == "next" || streamInterval.MatchString(o) {
			return nil
		}
	case int64:
		if o >= 0 {
			return nil
		}
	case int:
		if o >= 0 {
			return nil
		}
	case time.Time:
		return nil
	}
	return invalid("%s %v (%T): want \"first\", \"last\", \"next\", an interval such as \"7D\", an offset of 0 or more, or a time.Time", HeaderStreamOffset, v, v)
}
