package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// DefaultDemoQueue is the orders queue the demo uses unless told otherwise.
const DefaultDemoQueue = "acemq-demo.orders"

// DefaultDemoTimeout bounds a demo run unless told otherwise.
const DefaultDemoTimeout = 30 * time.Second

// cleanupTimeout bounds the deletion of the demo's queues after a run,
// which happens even when the run's own context is done.
const cleanupTimeout = 10 * time.Second

// DemoRetryAttempts and DemoRetryDelay are the demo consumer's retry
// policy: at most three deliveries, a second apart (the scheduler ladder's
// shortest rung).
const (
	DemoRetryAttempts = 3
	DemoRetryDelay    = time.Second
)

// demoOrder is the payload the demo publishes.
type demoOrder struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

// demoOrders are what the demo places: order 2 meets a payment gateway that
// times out twice, order 3 can never be placed.
var demoOrders = []demoOrder{
	{ID: 1, Customer: "alice", Item: "coffee beans", Quantity: 2},
	{ID: 2, Customer: "bob", Item: "espresso machine", Quantity: 1},
	{ID: 3, Customer: "carol", Item: "milk frother", Quantity: 0},
	{ID: 4, Customer: "dave", Item: "paper filters", Quantity: 5},
}

// gatewayOutages is how many times the simulated payment gateway times out
// for an order before it answers.
var gatewayOutages = map[int]int{2: 2}

// errGatewayTimeout is the simulated payment gateway's transient failure.
var errGatewayTimeout = errors.New("payment gateway timed out")

// DemoConfig configures a demo run. The zero value is the defaults.
type DemoConfig struct {
	// Queue is the orders queue ("" = DefaultDemoQueue). The demo deletes
	// it, with its .dlq and .parked, before it starts and when it ends, so
	// give each concurrent run a queue of its own.
	Queue string
	// Timeout bounds the whole run (0 = DefaultDemoTimeout).
	Timeout time.Duration
}

// Validate refuses a config the demo cannot run with.
func (c DemoConfig) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("demo: timeout %s, want a positive duration (or 0 for the default)", c.Timeout)
	}
	return nil
}

func (c DemoConfig) withDefaults() DemoConfig {
	if c.Queue == "" {
		c.Queue = DefaultDemoQueue
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultDemoTimeout
	}
	return c
}

// Demo runs the demo with the default DemoConfig; see DemoConfig.Run.
func Demo(ctx context.Context, conn *broker.Conn, out io.Writer) error {
	return DemoConfig{}.Run(ctx, conn, out)
}

// Run places four orders on conn and writes to out what became of each:
// two are handled on their first attempt, one fails twice and is handled
// on its third (each retry travels the scheduler ladder), and one can never
// be placed and is given up into the queue's .dlq, which the demo then
// reads back. It waits for every order to be settled, bounded by ctx and
// the config's timeout, and deletes its queues before returning.
func (c DemoConfig) Run(ctx context.Context, conn *broker.Conn, out io.Writer) (err error) {
	if err := c.Validate(); err != nil {
		return err
	}
	if conn == nil {
		return errors.New("demo: nil connection")
	}
	if out == nil {
		return errors.New("demo: nil output writer")
	}
	c = c.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()

	d := newDemo(conn, c.Queue, out)
	d.printf("acemq-flow demo on %s: queue %s, retry: %d attempts, %s apart, through the scheduler ladder %s\n",
		conn.Name(), d.queue, DemoRetryAttempts, DemoRetryDelay, conn.Ladder())
	if err := d.deleteQueues(ctx); err != nil {
		return fmt.Errorf("demo: remove queues left by an earlier run: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer ccancel()
		if cerr := d.deleteQueues(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("demo: clean up: %w", cerr))
		}
	}()
	if err := conn.Declare(ctx, broker.ConsumerTopology(d.queue)); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for _, o := range demoOrders {
		id := broker.NewID()
		d.byMessage[id] = o
		err := conn.Publish(ctx, o, broker.To(d.queue), broker.Mandatory(), broker.MessageID(id), broker.Type("order.placed.v1"))
		if err != nil {
			return fmt.Errorf("demo: place order %d: %w", o.ID, err)
		}
		d.printf("published order %d: %s, %d x %s\n", o.ID, o.Customer, o.Quantity, o.Item)
	}

	consumer, err := conn.Consume(ctx, d.queue, broker.Func(d.placeOrder),
		broker.WithRetry(broker.Constant(DemoRetryAttempts, DemoRetryDelay)), broker.Use(d.report))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer ccancel()
		if cerr := consumer.Cancel(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("demo: stop consumer: %w", cerr))
		}
	}()
	select {
	case <-d.done:
	case <-ctx.Done():
		return fmt.Errorf("demo: orders %v still unsettled: %w", d.unsettled(), ctx.Err())
	}
	// Cancel lets the last handler's move finish: once it returns, the
	// given-up order is confirmed in the .dlq.
	if err := consumer.Cancel(ctx); err != nil {
		return fmt.Errorf("demo: stop consumer: %w", err)
	}
	if err := d.readDeadLetters(ctx); err != nil {
		return err
	}
	d.printf("summary: %d orders done, %d dead-lettered\n", d.count(outcomeDone), d.count(outcomeDeadLettered))
	return d.out.Err()
}

// Outcomes the demo records per order.
const (
	outcomeDone         = "done"
	outcomeDeadLettered = "dead-lettered"
)

// demo is the state of one run.
type demo struct {
	conn  *broker.Conn
	queue string
	start time.Time
	out   *printer
	// byMessage maps a published message id to its order. It is written
	// before the consumer starts and only read after.
	byMessage map[string]demoOrder

	mu       sync.Mutex
	outages  map[int]int
	outcomes map[int]string
	done     chan struct{}
}

func newDemo(conn *broker.Conn, queue string, out io.Writer) *demo {
	outages := make(map[int]int, len(gatewayOutages))
	for id, n := range gatewayOutages {
		outages[id] = n
	}
	return &demo{
		conn:      conn,
		queue:     queue,
		start:     time.Now(),
		out:       &printer{w: out},
		byMessage: map[string]demoOrder{},
		outages:   outages,
		outcomes:  map[int]string{},
		done:      make(chan struct{}),
	}
}

func (d *demo) printf(format string, args ...any) { d.out.printf(format, args...) }

// placeOrder is the demo's business logic: an order that can never be
// placed is a fatal error (no retry can fix it), a payment gateway timeout
// an ordinary one (retried).
func (d *demo) placeOrder(_ context.Context, m *broker.Message) error {
	o, err := broker.Decode[demoOrder](m)
	if err != nil {
		return err
	}
	if o.Quantity < 1 {
		return broker.Fatal(fmt.Errorf("order %d: quantity must be at least 1, got %d", o.ID, o.Quantity))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.outages[o.ID] > 0 {
		d.outages[o.ID]--
		return fmt.Errorf("order %d: %w", o.ID, errGatewayTimeout)
	}
	return nil
}

// report is middleware that writes what the handler decided about each
// delivery, and signals once every order has reached its end.
func (d *demo) report(next broker.Handler) broker.Handler {
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		o, ours := d.byMessage[m.ID]
		if !ours {
			d.printf("%s  skipped message %s: left over from an earlier run\n", d.elapsed(), m.ID)
			return broker.Accept()
		}
		ack := next(ctx, m)
		prefix := fmt.Sprintf("%s  order %d, attempt %d:", d.elapsed(), o.ID, m.Attempt)
		dlq := d.queue + broker.DeadLetterSuffix
		var decodeErr *broker.DecodeError
		switch {
		case ack.Outcome() == broker.OutcomeAccept:
			d.printf("%s done\n", prefix)
			d.settle(o.ID, outcomeDone)
		case errors.As(ack.Err(), &decodeErr):
			d.printf("%s unreadable (%v): parked in %s\n", prefix, ack.Err(), d.queue+broker.ParkedSuffix)
			d.settle(o.ID, "parked")
		case ack.Outcome() == broker.OutcomeReject:
			d.printf("%s failed for good (%v): giving up into %s\n", prefix, ack.Err(), dlq)
			d.settle(o.ID, outcomeDeadLettered)
		case ack.Outcome() == broker.OutcomeRetry && m.Attempt >= DemoRetryAttempts:
			d.printf("%s failed (%v): out of attempts, giving up into %s\n", prefix, ack.Err(), dlq)
			d.settle(o.ID, outcomeDeadLettered)
		case ack.Outcome() == broker.OutcomeRetry:
			d.printf("%s failed (%v): retrying in %s\n", prefix, ack.Err(), DemoRetryDelay)
		default:
			d.printf("%s %s\n", prefix, ack.Outcome())
		}
		return ack
	}
}

// settle records an order's final outcome; the first time every order has
// one, it closes done.
func (d *demo) settle(order int, outcome string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	before := len(d.outcomes)
	d.outcomes[order] = outcome
	if before < len(demoOrders) && len(d.outcomes) == len(demoOrders) {
		close(d.done)
	}
}

func (d *demo) unsettled() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []int
	for _, o := range demoOrders {
		if _, ok := d.outcomes[o.ID]; !ok {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

func (d *demo) count(outcome string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, o := range d.outcomes {
		if o == outcome {
			n++
		}
	}
	return n
}

func (d *demo) elapsed() string {
	return fmt.Sprintf("%5.1fs", time.Since(d.start).Seconds())
}

// readDeadLetters takes every message out of the .dlq and shows why each
// was given up.
func (d *demo) readDeadLetters(ctx context.Context) error {
	dlq := d.queue + broker.DeadLetterSuffix
	var found []string
	for {
		m, err := d.conn.Transport().Get(ctx, dlq)
		if err != nil {
			return fmt.Errorf("demo: read %s: %w", dlq, err)
		}
		if m == nil {
			break
		}
		if err := m.Ack(); err != nil {
			return fmt.Errorf("demo: acknowledge a message from %s: %w", dlq, err)
		}
		what := "message " + m.MessageID
		if o, ok := d.byMessage[m.MessageID]; ok {
			what = fmt.Sprintf("order %d", o.ID)
		} else {
			var o demoOrder
			if json.Unmarshal(m.Body, &o) == nil && o.ID != 0 {
				what = fmt.Sprintf("order %d (from an earlier run)", o.ID)
			}
		}
		found = append(found, what)
		d.printf("%s holds %s: %s=%q, %s=%q\n", dlq, what,
			broker.HeaderError, header(m.Headers, broker.HeaderError), broker.HeaderQueue, header(m.Headers, broker.HeaderQueue))
	}
	if len(found) == 0 {
		d.printf("%s is empty\n", dlq)
	}
	return nil
}

// header is a header's value as text ("" when it is missing).
func header(h broker.Table, name string) string {
	v, ok := h[name]
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// deleteQueues deletes the demo's queue with its .dlq and .parked.
func (d *demo) deleteQueues(ctx context.Context) error {
	var errs []error
	for _, q := range []string{d.queue, d.queue + broker.DeadLetterSuffix, d.queue + broker.ParkedSuffix} {
		if _, err := d.conn.Transport().DeleteQueue(ctx, q); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
		}
	}
	return errors.Join(errs...)
}

// printer writes to the demo's output from the handler and the caller
// alike, and keeps the first write error.
type printer struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	if _, err := fmt.Fprintf(p.w, format, args...); err != nil {
		p.err = fmt.Errorf("demo: write output: %w", err)
	}
}

// Err is the first write error, or nil.
func (p *printer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
