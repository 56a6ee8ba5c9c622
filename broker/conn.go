package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
)

// Defaults that are ours to choose (docs/wire.md).
const (
	DefaultPrefetch        = 20
	DefaultCloseTimeout    = 20 * time.Second
	DefaultInProgressDelay = 5 * time.Second
)

// Config configures a connection. The zero value is the defaults; Validate
// says what is wrong with one that is not usable.
type Config struct {
	// Logger receives the library's logs (nil = slog.Default()).
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive metrics and spans (nil = the
	// otel globals).
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Prefetch is a consumer's default prefetch (0 = 20).
	Prefetch int
	// Retry is a consumer's default retry policy (nil = DefaultRetry).
	Retry *RetryPolicy
	// InProgressDelay is how long an InProgress put-back waits when the
	// handler named no delay (0 = 5 s).
	InProgressDelay time.Duration
	// CloseTimeout bounds Close and Consumer.Cancel when their context has
	// no deadline (0 = 20 s).
	CloseTimeout time.Duration
	// Ladder names the scheduler ladder ("" = DefaultLadder, the name every
	// AceMQ library shares). Tests sharing a broker set their own to stay
	// apart.
	Ladder string
	// Codec encodes payloads published without WithCodec (nil = JSON).
	Codec Codec
	// Codecs are further codecs consumers can decode, by content type.
	Codecs []Codec
	// RabbitMQ configures the RabbitMQ transport for amqp:// and amqps://
	// URLs; its Logger defaults to Logger.
	RabbitMQ rabbitmq.Config
	// Clock is where the connection reads the time wherever a time decides
	// what happens: the ladder's due times and rungs, retry delays and max
	// ages, in-progress put-backs, and the timestamps and first-seen times
	// of what it publishes (nil = SystemClock). A clock of the caller's is
	// for tests that skip time (package engine/flowtest): only the loopback
	// can follow it, since RabbitMQ expires the ladder's messages on its
	// own clock, so Open refuses it with an amqp:// URL and with a
	// memory://NAME one (a broker shared by name keeps the clock it was
	// created with); with a bare memory:// the loopback's TTLs expire on
	// it. The ladder's rung watch, a guard against a broker that keeps
	// messages past their TTL, does not run on such a clock.
	Clock Clock
}

// Validate refuses a config with out-of-range values.
func (c Config) Validate() error {
	switch {
	case c.Prefetch < 0:
		return invalid("prefetch %d, want at least 1 (or 0 for the default)", c.Prefetch)
	case c.InProgressDelay < 0, c.CloseTimeout < 0:
		return invalid("negative duration")
	}
	if c.Retry != nil {
		if err := c.Retry.Validate(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Retry == nil {
		r := DefaultRetry()
		c.Retry = &r
	}
	if c.InProgressDelay == 0 {
		c.InProgressDelay = DefaultInProgressDelay
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Ladder == "" {
		c.Ladder = DefaultLadder
	}
	if c.Codec == nil {
		c.Codec = JSON
	}
	if c.RabbitMQ.Logger == nil {
		c.RabbitMQ.Logger = c.Logger
	}
	return c
}

// Conn is a connection to a broker: it publishes, consumes, declares
// topology and runs the scheduler ladder's control consumer. It is safe for
// concurrent use. Close it to stop its consumers and release the broker.
type Conn struct {
	cfg          Config
	transport    transport.Transport
	log          *slog.Logger
	tel          *telemetry
	defaultCodec Codec
	codecs       codecs
	ladder       *ladder

	// nodes reports acemq.connection.node (nil without nodes).
	nodes metric.Registration

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex
	consumers map[*Consumer]struct{}
	// inFlight counts the deliveries the consumers hold (InFlight).
	inFlight atomic.Int64

	// limited holds the queues Declare found with an x-delivery-limit of an
	// earlier version, so that each is warned about once.
	limited sync.Map
}

// Open connects with the default Config; see Config.Open.
func Open(ctx context.Context, rawURL string) (*Conn, error) {
	return Config{}.Open(ctx, rawURL)
}

// Open connects to the broker at rawURL: amqp:// or amqps:// is RabbitMQ,
// memory:// the in-process loopback (memory://NAME shares one broker between
// every connection in the process opened with that NAME; a bare memory://
// is a broker of its own). A password in the URL never appears in logs or
// errors.
//
// A RabbitMQ URL may list the nodes of a cluster, which share user,
// password, virtual host and query
// (amqp://user:pass@rabbit-1:5672,rabbit-2:5672,rabbit-3:5672/vhost): the
// connection takes the first that answers and redials the next one when it
// loses its node (see package rabbitmq, and Conn.Node). An amqps:// URL's
// TLS settings are its query parameters cacertfile, certfile, keyfile and
// server_name_indication, or Config.RabbitMQ's.
func (c Config) Open(ctx context.Context, rawURL string) (*Conn, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	var t transport.Transport
	if scheme, _, _ := strings.Cut(rawURL, "://"); scheme == "amqp" || scheme == "amqps" {
		if c.Clock != nil {
			return nil, errClockOnRabbitMQ
		}
		// Not url.Parse: it refuses a list of nodes, and the transport
		// says what is wrong with a URL without repeating its password.
		rt, err := rabbitmq.Dial(ctx, rawURL, c.RabbitMQ)
		if errors.Is(err, rabbitmq.ErrInvalidURL) {
			err = &alsoInvalidURL{err}
		}
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		t = rt
	}
	u, err := url.Parse(rawURL)
	switch {
	case t != nil:
	case err != nil:
		return nil, fmt.Errorf("%w: %s", ErrInvalidURL, redactParseError(rawURL, err))
	case u.Scheme == "memory":
		name := u.Host + u.Path
		switch {
		case name == "":
			t = loopback.NewWithClock(c.Clock).Connect()
		case c.Clock != nil:
			return nil, invalid("a Clock with %s: a broker shared by name keeps the clock it was created with; use a bare memory://", u.Redacted())
		default:
			t = loopback.Named(name).Connect()
		}
	default:
		return nil, fmt.Errorf("%w: scheme %q in %s (want amqp, amqps or memory)", ErrInvalidURL, u.Scheme, u.Redacted())
	}
	conn, err := c.Wrap(t)
	if err != nil {
		_ = t.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// alsoInvalidURL is the transport's URL error, which errors.Is also sees
// as ErrInvalidURL.
type alsoInvalidURL struct{ err error }

func (e *alsoInvalidURL) Error() string   { return e.err.Error() }
func (e *alsoInvalidURL) Unwrap() []error { return []error{e.err, ErrInvalidURL} }

// redactParseError reports a URL that would not parse without repeating it,
// since the unparsable part may well be the password.
func redactParseError(raw string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "malformed URL"
}

// Wrap makes a Conn over a transport the caller opened (a loopback broker
// shared by a test, a custom transport). The Conn owns it from then on and
// closes it on Close. With a Clock, the transport must expire messages on
// the same clock (loopback.NewWithClock); a RabbitMQ transport is refused.
func (c Config) Wrap(t transport.Transport) (*Conn, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if _, rabbit := t.(*rabbitmq.Transport); rabbit && c.Clock != nil {
		return nil, errClockOnRabbitMQ
	}
	c = c.withDefaults()
	tel, err := newTelemetry(c.MeterProvider, c.TracerProvider)
	if err != nil {
		return nil, err
	}
	conn := &Conn{
		cfg:          c,
		transport:    t,
		log:          c.Logger.With(slog.String("broker", t.Name())),
		tel:          tel,
		defaultCodec: c.Codec,
		codecs:       newCodecs(append([]Codec{JSON, Raw, c.Codec}, c.Codecs...)...),
		consumers:    map[*Consumer]struct{}{},
	}
	conn.ladder = newLadder(conn, c.Ladder)
	if conn.nodes, err = observeNodes(c.MeterProvider, conn); err != nil {
		return nil, err
	}
	return conn, nil
}

// Transport is the transport under the connection, for patterns that need
// an operation the Conn does not wrap (basic.get, passive declaration).
func (c *Conn) Transport() transport.Transport { return c.transport }

// Name is what the connection is connected to, without any password.
func (c *Conn) Name() string { return c.transport.Name() }

// Logger is the connection's logger.
func (c *Conn) Logger() *slog.Logger { return c.log }

// Config is the connection's configuration with defaults filled in.
func (c *Conn) Config() Config { return c.cfg }

// Clock is the connection's clock: Config.Clock, or SystemClock.
func (c *Conn) Clock() Clock {
	if c.cfg.Clock == nil {
		return SystemClock{}
	}
	return c.cfg.Clock
}

// InFlight is how many deliveries the connection's consumers hold: taken
// off the transport and not yet done with, which is when the delivery is
// settled and the consumer's settle hook has returned. The ladder's
// control consumer counts too. Zero, with nothing unsettled on the
// transport, means that nothing this connection consumes moves until a
// message comes: what a test that skips time waits for before it moves
// the clock on (package engine/flowtest).
func (c *Conn) InFlight() int { return int(c.inFlight.Load()) }

// now is the time on the connection's clock; the system's without a
// call through an interface when it has none.
func (c *Conn) now() time.Time {
	if c.cfg.Clock == nil {
		return time.Now()
	}
	return c.cfg.Clock.Now()
}

// Declare declares every exchange, queue and binding of t; a reconnecting
// transport declares them again on every new connection. It refuses, before
// anything is sent, a stream or quorum queue declared transient, exclusive or
// auto-delete (*QueueTypeError). A queue t declares without an
// x-delivery-limit that exists with one (a consumer queue declared by an
// earlier version of this library) is declared as it exists, with its
// limit, and logged once as a warning: refusing it would stop every
// consumer of an existing deployment. Any other difference is refused as
// the broker refuses it (PRECONDITION_FAILED).
func (c *Conn) Declare(ctx context.Context, t Topology) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := checkQueueTypes(t); err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	err := c.transport.Declare(ctx, t)
	for err != nil {
		var (
			queue string
			limit int64
			ok    bool
		)
		if t, queue, limit, ok = withExistingDeliveryLimit(t, err); !ok {
			break
		}
		if _, warned := c.limited.LoadOrStore(queue, struct{}{}); !warned {
			c.log.Warn("queue exists with the x-delivery-limit of an earlier version; declared as it is",
				slog.String("queue", queue), slog.Int64("x-delivery-limit", limit),
				slog.String("consequence", "the other AceMQ libraries, which declare it without the argument, are refused (PRECONDITION_FAILED)"),
				slog.String("remedy", "give consumer queues their limit by policy (acemq-flow topology apply, docs/operations.md); then, with its consumers stopped and the queue empty, delete it and let them declare it again"))
		}
		err = c.transport.Declare(ctx, t)
	}
	if err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	return nil
}

// Close stops every consumer (each stops taking deliveries, lets its
// in-flight handlers finish and settles them), then the ladder's control
// consumer, then closes the transport. It is bounded by ctx, or by
// Config.CloseTimeout when ctx has no deadline. Idempotent: later calls
// return the first call's result.
func (c *Conn) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		ctx, cancel := c.bounded(ctx)
		defer cancel()
		c.mu.Lock()
		consumers := make([]*Consumer, 0, len(c.consumers))
		for k := range c.consumers {
			consumers = append(consumers, k)
		}
		c.mu.Unlock()
		errs := make([]error, len(consumers))
		var wg sync.WaitGroup
		for i, k := range consumers {
			wg.Go(func() { errs[i] = k.Cancel(ctx) })
		}
		wg.Wait()
		errs = append(errs, c.ladder.stop(ctx))
		if err := c.transport.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close transport: %w", err))
		}
		if c.nodes != nil {
			errs = append(errs, c.nodes.Unregister())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// bounded gives ctx the close deadline when it has none.
func (c *Conn) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.CloseTimeout)
}

func (c *Conn) track(k *Consumer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	c.consumers[k] = struct{}{}
	return nil
}

func (c *Conn) untrack(k *Consumer) {
	c.mu.Lock()
	delete(c.consumers, k)
	c.mu.Unlock()
}
