package patterns

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// ResponderFunc answers one request: the answer is encoded as the reply
// (with the connection's codec; a []byte goes raw), and an error is sent
// back to the caller as acemq-error with an empty body.
type ResponderFunc func(ctx context.Context, m *broker.Message) (any, error)

// Responder answers the requests on one queue. Stop it with Close (or by
// closing its connection).
type Responder struct {
	conn         *broker.Conn
	queue        string
	fn           ResponderFunc
	consumer     *broker.Consumer
	answered     atomic.Int64
	unanswerable atomic.Int64
}

// Serve starts answering the requests on queue with fn (consuming it as
// broker.Conn.Consume does, with opts). ctx bounds the setup only.
//
// The reply goes to ReplyAddress of the request (the acemq-reply-to header,
// else the reply_to property), carrying x-acemq-causation-id = the
// request's message id, which is how the requester matches it, and the
// request's correlation id. A failure of fn, or a panic in it, is replied
// as acemq-error. Having answered, the request is accepted and never
// retried, because a retry would answer twice; a reply the broker could not
// route (the requester is gone) is logged and the request still accepted. A
// request with no reply address is given up into queue.dlq with
// ErrNoReplyAddress and counted as unanswerable. A request that expires
// (as a Requester's do, with its caller's deadline) is answered under a
// context ending then, and one already expired when its turn comes (it
// waited in the consumer's prefetch) is accepted without running fn,
// counted as outcome="expired" on acemq.consume.total. It refuses a nil
// connection or function and an empty queue (broker.ErrInvalidOption).
func Serve(ctx context.Context, conn *broker.Conn, queue string, fn ResponderFunc, opts ...broker.ConsumeOption) (*Responder, error) {
	if conn == nil || fn == nil || queue == "" {
		return nil, fmt.Errorf("%w: serve: need a connection, a queue and a function", broker.ErrInvalidOption)
	}
	r := &Responder{conn: conn, queue: queue, fn: fn}
	k, err := conn.Consume(ctx, queue, r.handle, opts...)
	if err != nil {
		return nil, fmt.Errorf("serve %q: %w", queue, err)
	}
	r.consumer = k
	return r, nil
}

// Queue is the queue the responder answers.
func (r *Responder) Queue() string { return r.queue }

// Answered counts the requests answered, each counted before its reply is
// published, so it is current the instant a caller's round trip returns.
func (r *Responder) Answered() int64 { return r.answered.Load() }

// Unanswerable counts the requests that named nowhere to reply.
func (r *Responder) Unanswerable() int64 { return r.unanswerable.Load() }

// Close stops answering: in-flight requests are answered and settled,
// bounded by ctx (or the connection's CloseTimeout). Idempotent.
func (r *Responder) Close(ctx context.Context) error { return r.consumer.Cancel(ctx) }

func (r *Responder) handle(ctx context.Context, m *broker.Message) broker.Ack {
	to := ReplyAddress(m)
	if to == "" {
		r.unanswerable.Add(1)
		return broker.Reject(fmt.Errorf("%w (message %s on %q)", ErrNoReplyAddress, m.ID, r.queue))
	}
	if deadline, ok := requestDeadline(m); ok {
		if time.Now().After(deadline) {
			// Its caller gave up; the broker expires only what it still
			// holds, not what it already handed to this consumer.
			return broker.Accept().As(RequestOutcomeExpired)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	out, err := r.reply(ctx, m, to)
	if err != nil {
		// Nothing could be built to send, not even the failure.
		return broker.Reject(fmt.Errorf("reply to %q: %w", to, err))
	}
	r.answered.Add(1)
	if err := r.conn.Send(ctx, out); err != nil {
		r.conn.Logger().Warn("reply not delivered; the request is settled anyway, since answering twice is worse",
			slog.String("queue", r.queue), slog.String("message_id", m.ID), slog.String("reply_to", to), slog.Any("error", err))
	}
	return broker.Accept()
}

// reply runs fn and prepares its answer, or its failure, as the reply: an
// answer the codec cannot encode is a failure too.
func (r *Responder) reply(ctx context.Context, m *broker.Message, to string) (broker.Outgoing, error) {
	prepare := func(payload any, failure error) (broker.Outgoing, error) {
		opts := []broker.PublishOption{broker.To(to), broker.Mandatory(), broker.CausedBy(m)}
		if failure != nil {
			payload = []byte{}
			opts = append(opts, broker.Header(broker.HeaderReplyError, failure.Error()))
		}
		return r.conn.Prepare(ctx, payload, opts...)
	}
	answer, err := r.answer(ctx, m)
	out, perr := prepare(answer, err)
	if perr != nil && err == nil {
		return prepare(nil, fmt.Errorf("the answer could not be encoded: %w", perr))
	}
	return out, perr
}

// requestExpiryGrace is added to a request's expiry before the responder
// gives up on it, for clocks that disagree a little between hosts.
const requestExpiryGrace = 250 * time.Millisecond

// requestDeadline is when the caller of request m stops waiting: its
// first-seen time (milliseconds, set when the caller sent it) plus its
// expiration, plus requestExpiryGrace. ok is false for a request that does
// not expire.
func requestDeadline(m *broker.Message) (deadline time.Time, ok bool) {
	raw := m.Raw()
	if raw == nil || m.FirstSeen.IsZero() {
		return time.Time{}, false
	}
	ttl, ok, err := transport.ParseExpiration(raw.Expiration)
	if err != nil || !ok {
		return time.Time{}, false
	}
	return m.FirstSeen.Add(ttl + requestExpiryGrace), true
}

// answer runs fn, turning a panic into a failure sent back to the caller
// rather than a retry that would run it again.
func (r *Responder) answer(ctx context.Context, m *broker.Message) (answer any, err error) {
	defer func() {
		if p := recover(); p != nil {
			answer, err = nil, fmt.Errorf("responder panicked: %v", p)
		}
	}()
	return r.fn(ctx, m)
}
