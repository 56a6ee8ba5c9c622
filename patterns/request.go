package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// requestReplyPrefix names the reply queues requesters declare.
const requestReplyPrefix = "acemq.reply."

// requestDefaultPrefetch is the reply consumer's prefetch when none is given.
const requestDefaultPrefetch = 100

// Requester sends requests to one destination and waits for their replies.
// It is meant to be kept and reused (it holds a reply queue and a consumer)
// and is safe for concurrent callers. Close it when done.
type Requester struct {
	conn     *broker.Conn
	to       string
	timeout  time.Duration
	cfg      requestConfig
	reply    string
	owned    bool
	consumer *broker.Consumer
	metrics  *requestMetrics

	mu      sync.Mutex
	pending map[string]chan *broker.Message
	closed  bool

	closeOnce sync.Once
	closeErr  error
}

// NewRequester prepares to send requests to to (a queue, or a routing key
// with RequestExchange), each waiting at most timeout for its reply. Unless
// RequestReplyTo names a queue, it declares its own reply queue: exclusive,
// transient, auto-delete and classic (the one classic queue this library
// declares), named acemq.reply.<id>, gone with the requester or its
// connection so that no queue collects answers nobody waits for. ctx
// bounds the setup. It refuses a nil connection, an empty destination and
// a timeout that is not positive (broker.ErrInvalidOption).
func NewRequester(ctx context.Context, conn *broker.Conn, to string, timeout time.Duration, opts ...RequestOption) (*Requester, error) {
	if conn == nil || to == "" || timeout <= 0 {
		return nil, fmt.Errorf("%w: requester: need a connection, a destination and a positive timeout (got %q, %s)", broker.ErrInvalidOption, to, timeout)
	}
	cfg := requestConfig{prefetch: requestDefaultPrefetch}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("requester for %q: %w", to, err)
		}
	}
	metrics, err := newRequestMetrics(conn, to)
	if err != nil {
		return nil, err
	}
	r := &Requester{conn: conn, to: to, timeout: timeout, cfg: cfg, reply: cfg.replyTo, metrics: metrics,
		pending: map[string]chan *broker.Message{}}
	if r.reply == "" {
		r.reply, r.owned = requestReplyPrefix+broker.NewID(), true
		err := conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{{
			Name: r.reply, Exclusive: true, AutoDelete: true, Args: broker.Table{"x-queue-type": "classic"},
		}}})
		if err != nil {
			return nil, fmt.Errorf("requester for %q: reply queue: %w", to, err)
		}
	}
	copts := []broker.ConsumeOption{broker.Existing(), broker.Exclusive(), broker.WithRetry(broker.NoRetry()),
		broker.Prefetch(cfg.prefetch)}
	for _, c := range replyCodecs(conn.Config(), cfg.codec) {
		copts = append(copts, broker.WithCodec(c))
	}
	r.consumer, err = conn.Consume(ctx, r.reply, r.deliver, copts...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("requester for %q: consume replies: %w", to, err), r.dropReplyQueue(ctx))
	}
	return r, nil
}

// ReplyQueue is the queue the requester's replies arrive on.
func (r *Requester) ReplyQueue() string { return r.reply }

// Call sends payload as a request and waits for the reply, decoding it into
// out (nil discards it). See CallMessage for what it returns; a reply that
// succeeded but does not decode is the codec's error (a *broker.DecodeError
// for JSON).
func (r *Requester) Call(ctx context.Context, payload, out any, opts ...broker.PublishOption) error {
	m, err := r.CallMessage(ctx, payload, opts...)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := m.Decode(out); err != nil {
		return fmt.Errorf("request to %q: reply: %w", r.to, err)
	}
	return nil
}

// CallMessage sends payload as a request (with opts: Type, Header, ...) and
// returns the reply. The wait ends at the requester's timeout or ctx's
// deadline, whichever is sooner, and the request expires on the broker at
// the same moment, so a backed-up responder does not work for nobody.
//
// It returns an error matching ErrRequestTimedOut (and
// context.DeadlineExceeded) when no reply came in time, a *ResponderFailed
// when the responder's function failed, ctx's error when the caller
// cancelled, broker.ErrClosed once the requester is closed,
// broker.ErrInvalidOption for a MessageID another call of this requester
// is still waiting under (replies are matched by it), and the publish
// error when the request could not be sent (broker.ErrUnroutable: nothing
// is bound to receive it).
func (r *Requester) CallMessage(ctx context.Context, payload any, opts ...broker.PublishOption) (*broker.Message, error) {
	start := time.Now()
	m, err := r.call(ctx, payload, opts)
	r.metrics.record(start, err)
	return m, err
}

func (r *Requester) call(parent context.Context, payload any, opts []broker.PublishOption) (*broker.Message, error) {
	ctx, cancel := context.WithTimeout(parent, r.timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	all := make([]broker.PublishOption, 0, len(opts)+6)
	all = append(all, opts...)
	all = append(all, broker.To(r.to), broker.ToExchange(r.cfg.exchange), broker.Mandatory(), broker.ReplyTo(r.reply))
	if r.cfg.codec != nil {
		all = append(all, broker.WithCodec(r.cfg.codec))
	}
	remaining := time.Until(deadline)
	if remaining <= 0 {
		return nil, r.timedOut(parent)
	}
	all = append(all, broker.Expires(remaining))
	out, err := r.conn.Prepare(ctx, payload, all...)
	if err != nil {
		return nil, fmt.Errorf("request to %q: %w", r.to, err)
	}
	id := out.Message.MessageID
	ch := make(chan *broker.Message, 1)
	if err := r.await(id, ch); err != nil {
		return nil, err
	}
	defer r.forget(id)
	if err := r.conn.Send(ctx, out); err != nil {
		// A deadline (the requester's or the caller's) that passed while
		// the request was being sent is a request that timed out.
		if ctx.Err() != nil && (parent.Err() == nil || errors.Is(parent.Err(), context.DeadlineExceeded)) {
			return nil, r.timedOut(parent)
		}
		return nil, fmt.Errorf("request to %q: %w", r.to, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("request to %q: %w", r.to, broker.ErrClosed)
		}
		if msg, failed := replyError(m); failed {
			return m, &ResponderFailed{To: r.to, Message: msg}
		}
		return m, nil
	case <-ctx.Done():
		if parent.Err() != nil && !errors.Is(parent.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("request to %q: %w", r.to, parent.Err())
		}
		return nil, r.timedOut(parent)
	}
}

func (r *Requester) timedOut(parent context.Context) error {
	wait := r.timeout
	if d, ok := parent.Deadline(); ok && time.Until(d) < 0 {
		return fmt.Errorf("request to %q: %w: the caller's deadline passed: %w", r.to, ErrRequestTimedOut, context.DeadlineExceeded)
	}
	return fmt.Errorf("request to %q: %w after %s: %w", r.to, ErrRequestTimedOut, wait, context.DeadlineExceeded)
}

// await registers ch for the reply to request id.
func (r *Requester) await(id string, ch chan *broker.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("request to %q: %w", r.to, broker.ErrClosed)
	}
	if _, taken := r.pending[id]; taken {
		// Replies are matched by the request's id: two waiting under one
		// id could not both get theirs.
		return fmt.Errorf("%w: request to %q: message id %q is already waiting for its reply", broker.ErrInvalidOption, r.to, id)
	}
	r.pending[id] = ch
	return nil
}

func (r *Requester) forget(id string) {
	r.mu.Lock()
	delete(r.pending, id)
	r.mu.Unlock()
}

// deliver hands a reply to the caller waiting for it, matched by
// x-acemq-causation-id. A reply nobody waits for (it came after its
// caller gave up) is acknowledged and dropped.
func (r *Requester) deliver(_ context.Context, m *broker.Message) broker.Ack {
	r.mu.Lock()
	ch, ok := r.pending[m.CausationID]
	delete(r.pending, m.CausationID)
	r.mu.Unlock()
	if !ok {
		r.conn.Logger().Debug("late or unmatched reply dropped", slog.String("reply_queue", r.reply),
			slog.String("causation_id", m.CausationID))
		return broker.Accept()
	}
	ch <- m
	return broker.Accept()
}

// Close stops the reply consumer and deletes the reply queue the requester
// declared (not one given with RequestReplyTo), bounded by ctx. Callers
// still waiting get broker.ErrClosed. Idempotent.
func (r *Requester) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		for id, ch := range r.pending {
			close(ch)
			delete(r.pending, id)
		}
		r.mu.Unlock()
		r.closeErr = errors.Join(r.consumer.Cancel(ctx), r.dropReplyQueue(ctx))
	})
	return r.closeErr
}

// dropReplyQueue deletes the reply queue if the requester declared it; the
// broker would on its own once the consumer or connection goes, but the
// transport would also redeclare it after a reconnect until told to forget.
func (r *Requester) dropReplyQueue(ctx context.Context) error {
	if !r.owned {
		return nil
	}
	if _, err := r.conn.Transport().DeleteQueue(ctx, r.reply); err != nil {
		return fmt.Errorf("requester for %q: delete reply queue %s: %w", r.to, r.reply, err)
	}
	return nil
}
