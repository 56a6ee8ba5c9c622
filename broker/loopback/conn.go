package loopback

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/acemq/acemq-flow/broker/transport"
)

// conn is one connection to a Broker: a transport.Transport.
type conn struct {
	b      *Broker
	closed bool
	subs   map[*subscription]struct{}
	// unsettled holds every delivery not yet settled, to requeue on Close.
	unsettled map[*pending]struct{}
	// exclusive holds the exclusive queues this connection owns.
	exclusive map[*queue]struct{}
	seq       uint64
}

var _ transport.Transport = (*conn)(nil)

// lock takes the broker's lock for an operation, refusing it when ctx is
// done or the connection is closed. On success the caller must unlock.
func (c *conn) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.b.mu.Lock()
	if c.closed {
		c.b.mu.Unlock()
		return transport.ErrClosed
	}
	return nil
}

// Declare declares the exchanges, queues and bindings of t in that order,
// stopping at the first refusal. The loopback never reconnects, so it
// keeps nothing for redeclaration.
func (c *conn) Declare(ctx context.Context, t transport.Topology) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	defer c.b.mu.Unlock()
	for _, e := range t.Exchanges {
		if err := c.declareExchange(e); err != nil {
			return fmt.Errorf("declare exchange %q: %w", e.Name, err)
		}
	}
	for _, q := range t.Queues {
		if err := c.declareQueue(q); err != nil {
			return fmt.Errorf("declare queue %q: %w", q.Name, err)
		}
	}
	for _, bd := range t.Bindings {
		if err := c.declareBinding(bd); err != nil {
			return fmt.Errorf("bind queue %q to exchange %q with key %q: %w", bd.Queue, bd.Exchange, bd.Key, err)
		}
	}
	return nil
}

// Publish routes p to its queues, confirmed at once. It refuses an invalid
// Expiration or header, what transport.CheckPublishing refuses for
// RabbitMQ's default frame_max (transport.ErrTooLarge), a missing exchange
// (404) and an internal one (403);
// an unroutable mandatory message is a *transport.ReturnedError, and a
// queue refusing it (x-overflow reject-publish) is transport.ErrNacked.
func (c *conn) Publish(ctx context.Context, p transport.Publishing) error {
	if err := c.publish(ctx, p); err != nil {
		return fmt.Errorf("publish to exchange %q with routing key %q: %w", p.Exchange, p.RoutingKey, err)
	}
	return nil
}

func (c *conn) publish(ctx context.Context, p transport.Publishing) error {
	msg, err := newMessage(p.Message)
	if err != nil {
		return err
	}
	if err := transport.CheckPublishing(p, transport.DefaultFrameMax); err != nil {
		return err
	}
	if err := c.lock(ctx); err != nil {
		return err
	}
	b := c.b
	defer b.mu.Unlock()
	ex, ok := b.exchanges[p.Exchange]
	if !ok {
		return notFoundExchange(p.Exchange)
	}
	if ex.internal {
		return amqpError(transport.AccessRefused, "cannot publish to internal exchange '%s' in vhost '/'", p.Exchange)
	}
	targets := b.route(ex, p.RoutingKey)
	if len(targets) == 0 {
		if p.Mandatory {
			return &transport.ReturnedError{Exchange: p.Exchange, RoutingKey: p.RoutingKey, ReplyCode: 312, ReplyText: "NO_ROUTE"}
		}
		return nil
	}
	now := b.now()
	nacked := false
	for _, q := range targets {
		if !b.enqueue(q, &message{msg: msg, exchange: p.Exchange, routingKey: p.RoutingKey}, now) {
			nacked = true
		}
	}
	b.flush(now)
	if nacked {
		return transport.ErrNacked
	}
	return nil
}

// Consume subscribes to queue. It refuses a prefetch below 1, invalid
// arguments, stream arguments (x-stream-offset or any other x-stream-*:
// transport.ErrNotSupported, whether or not the queue exists), a missing
// queue (404), another connection's exclusive queue (405) and a queue with
// an exclusive consumer, or an exclusive subscription to a queue that has
// consumers (403).
func (c *conn) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Subscription, error) {
	s, err := c.consume(ctx, queue, opts)
	if err != nil {
		return nil, fmt.Errorf("consume %q: %w", queue, err)
	}
	return s, nil
}

func (c *conn) consume(ctx context.Context, name string, opts transport.ConsumeOptions) (*subscription, error) {
	if opts.Prefetch < 1 {
		return nil, fmt.Errorf("prefetch %d: must be at least 1", opts.Prefetch)
	}
	if err := opts.Args.Validate(); err != nil {
		return nil, err
	}
	if err := refuseStreamArgs(opts.Args); err != nil {
		return nil, err
	}
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	b := c.b
	defer b.mu.Unlock()
	q, err := c.queue(name)
	if err != nil {
		return nil, err
	}
	if len(q.consumers) > 0 && (opts.Exclusive || q.consumers[0].exclusive) {
		return nil, amqpError(transport.AccessRefused, "queue '%s' in vhost '/' in exclusive use", name)
	}
	tag := opts.Tag
	if tag == "" {
		tag = "amq.ctag-loopback-" + b.next()
	}
	s := &subscription{
		b: b, c: c, q: q, tag: tag, prefetch: opts.Prefetch, exclusive: opts.Exclusive,
		ch: make(chan *transport.Delivery, opts.Prefetch),
	}
	q.consumers = append(q.consumers, s)
	c.subs[s] = struct{}{}
	b.markDirty(q)
	b.flush(b.now())
	return s, nil
}

// Get takes the message at the head of queue, or returns nil when there is
// none. It refuses a missing queue (404) and another connection's
// exclusive queue (405).
func (c *conn) Get(ctx context.Context, queue string) (*transport.Delivery, error) {
	if err := c.lock(ctx); err != nil {
		return nil, fmt.Errorf("get from %q: %w", queue, err)
	}
	b := c.b
	defer b.mu.Unlock()
	q, err := c.queue(queue)
	if err != nil {
		return nil, fmt.Errorf("get from %q: %w", queue, err)
	}
	now := b.now()
	b.expireHead(q, now)
	m := q.take()
	b.markDirty(q)
	b.flush(now)
	if m == nil {
		return nil, nil
	}
	return b.delivery(c, q, m, nil), nil
}

// Inspect reports how many messages are ready in queue and how many
// consumers it has; 404 when it does not exist, 405 when it is another
// connection's exclusive queue.
func (c *conn) Inspect(ctx context.Context, queue string) (transport.QueueState, error) {
	if err := c.lock(ctx); err != nil {
		return transport.QueueState{}, fmt.Errorf("inspect %q: %w", queue, err)
	}
	defer c.b.mu.Unlock()
	q, err := c.queue(queue)
	if err != nil {
		return transport.QueueState{}, fmt.Errorf("inspect %q: %w", queue, err)
	}
	return transport.QueueState{Name: q.name, Messages: q.ready.len(), Consumers: len(q.consumers)}, nil
}

// Purge drops every ready message of queue and says how many; unsettled
// deliveries are not touched. It refuses like Inspect.
func (c *conn) Purge(ctx context.Context, queue string) (int, error) {
	if err := c.lock(ctx); err != nil {
		return 0, fmt.Errorf("purge %q: %w", queue, err)
	}
	b := c.b
	defer b.mu.Unlock()
	q, err := c.queue(queue)
	if err != nil {
		return 0, fmt.Errorf("purge %q: %w", queue, err)
	}
	n := q.clearReady()
	b.arm(q, b.now())
	return n, nil
}

// DeleteQueue deletes queue and says how many ready messages went with it;
// its consumers end with an Err. A missing queue is not an error; another
// connection's exclusive queue is (405).
func (c *conn) DeleteQueue(ctx context.Context, queue string) (int, error) {
	if err := c.lock(ctx); err != nil {
		return 0, fmt.Errorf("delete queue %q: %w", queue, err)
	}
	b := c.b
	defer b.mu.Unlock()
	q, err := c.queue(queue)
	if transport.IsCode(err, transport.NotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delete queue %q: %w", queue, err)
	}
	n := q.ready.len()
	b.deleteQueue(q)
	b.flush(b.now())
	return n, nil
}

// DeleteExchange deletes exchange and its bindings. A missing exchange is
// not an error; the default exchange and the pre-declared amq.* ones
// cannot be deleted (403).
func (c *conn) DeleteExchange(ctx context.Context, exchange string) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("delete exchange %q: %w", exchange, err)
	}
	b := c.b
	defer b.mu.Unlock()
	if exchange == "" {
		return fmt.Errorf("delete exchange %q: %w", exchange, defaultExchangeRefused())
	}
	ex, ok := b.exchanges[exchange]
	if !ok {
		return nil
	}
	if ex.system {
		return fmt.Errorf("delete exchange %q: %w", exchange,
			amqpError(transport.AccessRefused, "deletion of system exchange '%s' in vhost '/' not allowed", exchange))
	}
	delete(b.exchanges, exchange)
	return nil
}

// Unbind removes a binding. A binding, queue or exchange that does not
// exist is not an error (as in RabbitMQ 3.10); the default exchange (403)
// and another connection's exclusive queue (405) are.
func (c *conn) Unbind(ctx context.Context, bd transport.Binding) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("unbind: %w", err)
	}
	b := c.b
	defer b.mu.Unlock()
	fail := func(err error) error {
		return fmt.Errorf("unbind queue %q from exchange %q with key %q: %w", bd.Queue, bd.Exchange, bd.Key, err)
	}
	if bd.Exchange == "" {
		return fail(defaultExchangeRefused())
	}
	if err := bd.Args.Validate(); err != nil {
		return fail(err)
	}
	q, err := c.queue(bd.Queue)
	if transport.IsCode(err, transport.NotFound) {
		return nil
	}
	if err != nil {
		return fail(err)
	}
	ex, ok := b.exchanges[bd.Exchange]
	if !ok {
		return nil
	}
	args := normalizeHeaders(bd.Args)
	if i := slices.IndexFunc(ex.bindings, func(x *binding) bool { return x.same(q, bd.Key, args) }); i >= 0 {
		b.unbind(ex, ex.bindings[i])
	}
	return nil
}

// Close ends every subscription, gives every unsettled delivery back to its
// queue (marked redelivered: in its original position in a classic queue,
// ahead of the ready messages in a quorum queue) and deletes this
// connection's exclusive queues. Idempotent.
func (c *conn) Close(ctx context.Context) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if !c.closed {
		c.b.closeConn(c)
		c.b.flush(c.b.now())
	}
	return nil
}

// closeConn closes c under the broker's lock.
func (b *Broker) closeConn(c *conn) {
	c.closed = true
	delete(b.conns, c)
	for s := range c.subs {
		b.endSubscription(s, nil)
	}
	// In delivery order: a quorum queue serves returned messages in the
	// order they were delivered.
	pending := slices.SortedFunc(maps.Keys(c.unsettled), func(x, y *pending) int { return cmp.Compare(x.seq, y.seq) })
	now := b.now()
	for _, p := range pending {
		if !p.q.deleted {
			b.putBack(p.q, p.m, returned, now)
		}
	}
	b.unsettled -= len(c.unsettled)
	c.unsettled = nil
	for q := range c.exclusive {
		b.deleteQueue(q)
	}
}

// Name is the broker's name, "memory://...".
func (c *conn) Name() string { return c.b.name }
