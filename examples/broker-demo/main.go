// Broker-demo is the broker core without the engine: it places four orders
// on a queue and shows what becomes of each. Two are handled at once; one
// meets a payment gateway that times out twice and is handled on its third
// attempt, each retry travelling the scheduler ladder back to the queue with
// x-acemq-attempt increased; one can never be placed (its handler returns
// broker.Fatal) and is given up into the queue's .dlq at once, with the
// reason in x-acemq-error, which the example reads back. (This was the
// first `acemq-flow demo`; the demo now runs the place-order flow.)
//
// It runs on the embedded in-process broker unless ACEMQ_URL names a
// RabbitMQ, for example amqp://guest:guest@127.0.0.1:5672/:
//
//	go run ./examples/broker-demo
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := open(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker-demo:", err)
		os.Exit(1)
	}
}

// open connects to ACEMQ_URL (the embedded broker when it is not set) and
// runs the example on it.
func open(ctx context.Context, out io.Writer) (err error) {
	url := os.Getenv("ACEMQ_URL")
	if url == "" {
		url = "memory://"
	}
	conn, err := broker.Open(ctx, url)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()
	return run(ctx, conn, queue, out)
}

// queue is the example's orders queue; it is deleted, with its .dlq and
// .parked, before the example starts and when it ends.
const queue = "acemq-example.orders"

// timeout bounds the example.
const timeout = 30 * time.Second

// cleanupTimeout bounds the deletion of the queues after a run, which
// happens even when the run's own context is done.
const cleanupTimeout = 10 * time.Second

// retryAttempts and retryDelay are the consumer's retry policy: at most three deliveries, a second apart (the scheduler ladder's
// shortest rung).
const (
	retryAttempts = 3
	retryDelay    = time.Second
)

// Order is the payload the example publishes.
type Order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

// Orders are what the demo places: order 2 meets a payment gateway that
// times out twice, order 3 can never be placed.
var Orders = []Order{
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

// run places four orders on conn's queue q and writes to out what became
// of each: two are handled on their first attempt, one fails twice and is
// handled on its third (each retry travels the scheduler ladder), and one
// can never be placed and is given up into the queue's .dlq, which the
// example then reads back. It waits for every order to be settled, bounded
// by ctx and timeout, and deletes its queues before returning.
func run(ctx context.Context, conn *broker.Conn, q string, out io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	d := newDemo(conn, q, out)
	d.printf("broker-demo on %s: queue %s, retry: %d attempts, %s apart, through the scheduler ladder %s\n",
		conn.Name(), d.queue, retryAttempts, retryDelay, conn.Ladder())
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
	for _, o := range Orders {
		id := broker.NewID()
		d.byMessage[id] = o
		err := conn.Publish(ctx, o, broker.To(d.queue), broker.Mandatory(), broker.MessageID(id), broker.Type("order.placed.v1"))
		if err != nil {
			return fmt.Errorf("demo: place order %d: %w", o.ID, err)
		}
		d.printf("published order %d: %s, %d x %s\n", o.ID, o.Customer, o.Quantity, o.Item)
	}

	consumer, err := conn.Consume(ctx, d.queue, broker.Func(d.placeOrder),
		broker.WithRetry(broker.Constant(retryAttempts, retryDelay)), broker.Use(d.report))
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
	byMessage map[string]Order

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
		byMessage: map[string]Order{},
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
	o, err := broker.Decode[Order](m)
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
		case ack.Outcome() == broker.OutcomeRetry && m.Attempt >= retryAttempts:
			d.printf("%s failed (%v): out of attempts, giving up into %s\n", prefix, ack.Err(), dlq)
			d.settle(o.ID, outcomeDeadLettered)
		case ack.Outcome() == broker.OutcomeRetry:
			d.printf("%s failed (%v): retrying in %s\n", prefix, ack.Err(), retryDelay)
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
	if before < len(Orders) && len(d.outcomes) == len(Orders) {
		close(d.done)
	}
}

func (d *demo) unsettled() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []int
	for _, o := range Orders {
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
			var o Order
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
