// Flow-external shows a step that another service serves: dsl.External.
// The flow travels as an AceMQ pipeline (x-acemq-route, the route's step
// names, and x-acemq-route-position, where the run is), so a service in
// any language can serve a step: it consumes <flow>.<step> and passes the
// run on by publishing to exchange <flow> with the next step's name as
// routing key and the position one further on, carrying the other headers
// as they came (the run id, the engine's acemq-flow-run). The engine
// declares the External step's queue, sends runs to it, never consumes it,
// and takes the run back at the step after.
//
// Here the invoice flow drafts an invoice in Go, has it signed by a
// "ledger service", and sends it in Go. The ledger service is a plain
// github.com/rabbitmq/amqp091-go consumer, in this same process for the
// example's sake, written as a Java or Ruby service would be: it knows
// nothing of acemq-flow but the headers above.
//
// It needs RabbitMQ (the embedded broker speaks no AMQP to a plain
// client): ACEMQ_URL, or amqp://guest:guest@127.0.0.1:5672/ when it is
// not set.
//
//	go run ./examples/flow-external
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// defaultURL is the RabbitMQ used when ACEMQ_URL is not set.
const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// flowName is the example's flow: its exchange and the prefix of its
// queues, deleted before it starts and when it ends.
const flowName = "acemq-example.invoice"

// Invoice is the payload of a run.
type Invoice struct {
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
	Number      string `json:"number,omitempty"`
	// Signature is set by the ledger service, which serves step sign.
	Signature string `json:"signature,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	url := os.Getenv("ACEMQ_URL")
	if url == "" {
		url = defaultURL
	}
	err := run(ctx, url, flowName, "", os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-external:", err)
		os.Exit(1)
	}
}

// run runs the invoice flow, named name, on the RabbitMQ at url with the
// scheduler ladder ladder ("" = the default), the ledger service serving
// its sign step.
func run(ctx context.Context, url, name, ladder string, w io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out := &syncWriter{w: w}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := broker.Config{Logger: quiet, Ladder: ladder}.Open(ctx, url)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()

	invoice := dsl.Flow(name,
		dsl.Step("draft", func(_ context.Context, inv Invoice) (Invoice, error) {
			inv.Number = "INV-1042"
			out.printf("draft (Go): invoice %s, %d cents for %s\n", inv.Number, inv.AmountCents, inv.Customer)
			return inv, nil
		}),
		dsl.External("sign"),
		dsl.Step("send", func(_ context.Context, inv Invoice) (Invoice, error) {
			out.printf("send (Go): invoice %s, signed %q, sent to %s\n", inv.Number, inv.Signature, inv.Customer)
			return inv, nil
		}),
	)
	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	if err := eng.Register(invoice); err != nil {
		return err
	}
	info, err := eng.Flow(name)
	if err != nil {
		return err
	}
	if err := deleteFlow(ctx, conn, info); err != nil {
		return fmt.Errorf("remove what an earlier run left: %w", err)
	}
	defer func() { err = errors.Join(err, deleteFlow(context.WithoutCancel(ctx), conn, info)) }()
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Close(context.WithoutCancel(ctx))) }()

	ledger, err := serveSign(url, name, out)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ledger.close()) }()

	out.printf("starting a run of %s: draft (Go) → sign (the ledger service, plain AMQP) → send (Go)\n", name)
	res, err := eng.Start(ctx, name, Invoice{Customer: "Barbara", AmountCents: 12900})
	if err != nil {
		return err
	}
	r, err := stopped(ctx, eng, res.RunID)
	if err != nil {
		return err
	}
	out.printf("the journal says: the run is %s; its timeline:\n", r.Status)
	tl, err := eng.Journal().Timeline(ctx, res.RunID)
	if err != nil {
		return err
	}
	for _, e := range tl {
		out.printf("  %-8s %-5s %s\n", e.Kind, e.Step, e.Outcome)
	}
	return nil
}

// ledgerService is the plain AMQP service that serves step sign.
type ledgerService struct {
	conn *amqp.Connection
	done chan struct{}
}

// serveSign starts the ledger service on flow's sign queue: for each run
// it signs the invoice and passes the run on to the next step of its
// route, as any AceMQ follower does, whatever its language.
func serveSign(url, flow string, out *syncWriter) (*ledgerService, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("ledger service: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err == nil {
		err = ch.Qos(1, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(flow+".sign", "", false, false, false, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("ledger service: %w", err)
	}
	s := &ledgerService{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for d := range deliveries {
			if err := sign(ch, flow, d, out); err != nil {
				out.printf("sign (ledger service): %v; the run goes back to the queue\n", err)
				_ = d.Nack(false, true)
				continue
			}
			_ = d.Ack(false)
		}
	}()
	return s, nil
}

// close stops the ledger service and waits for it to finish.
func (s *ledgerService) close() error {
	err := s.conn.Close()
	<-s.done
	return err
}

// sign signs the invoice in d and publishes the run to the next step of
// its route, waiting for the broker's confirm before d is acknowledged.
func sign(ch *amqp.Channel, flow string, d amqp.Delivery, out *syncWriter) error {
	var inv map[string]any // a service in another language knows the JSON, not the Go type
	if err := json.Unmarshal(d.Body, &inv); err != nil {
		return err
	}
	inv["signature"] = "ledger/2026/1042"
	body, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	route, _ := d.Headers["x-acemq-route"].([]any)
	pos, ok := integer(d.Headers["x-acemq-route-position"])
	if !ok || pos+1 >= len(route) {
		return fmt.Errorf("no step after position %v of route %v", d.Headers["x-acemq-route-position"], route)
	}
	next, _ := route[pos+1].(string)
	out.printf("sign (ledger service): signed %v; passing the run on to %s (x-acemq-route-position %d → %d)\n", inv["number"], next, pos, pos+1)

	// Every header travels on (the run id, the route, the engine's state);
	// the position moves one step; the hop is a new message caused by d.
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers["x-acemq-route-position"] = int64(pos + 1)
	headers["x-acemq-causation-id"] = d.MessageId
	headers["x-acemq-attempt"] = int64(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, flow, next, true, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: newID(),
		CorrelationId: d.CorrelationId, Type: d.Type, Timestamp: time.Now(), Headers: headers, Body: body,
	})
	if err != nil {
		return err
	}
	if ok, err := conf.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("publish to %s: not confirmed (%v)", next, err)
	}
	return nil
}

// integer reads an AMQP integer header of any width.
func integer(v any) (int, bool) {
	switch n := v.(type) {
	case int8:
		return int(n), true
	case uint8:
		return int(n), true
	case int16:
		return int(n), true
	case uint16:
		return int(n), true
	case int32:
		return int(n), true
	case uint32:
		return int(n), true
	case int64:
		return int(n), true
	}
	return 0, false
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// deleteFlow deletes the flow's queues (with their .dlq and .parked) and
// its exchange.
func deleteFlow(ctx context.Context, conn *broker.Conn, info engine.FlowInfo) error {
	var errs []error
	for _, s := range info.Steps {
		for _, q := range []string{s.Queue, s.Queue + broker.DeadLetterSuffix, s.Queue + broker.ParkedSuffix} {
			_, err := conn.Transport().DeleteQueue(ctx, q)
			errs = append(errs, err)
		}
	}
	for _, q := range []string{info.CompensateQueue, info.CompensateQueue + broker.DeadLetterSuffix, info.CompensateQueue + broker.ParkedSuffix} {
		_, err := conn.Transport().DeleteQueue(ctx, q)
		errs = append(errs, err)
	}
	errs = append(errs, conn.Transport().DeleteExchange(ctx, info.Exchange))
	return errors.Join(errs...)
}

// stopped waits until the journal shows the run stopped, looking every
// 20 ms.
func stopped(ctx context.Context, eng *engine.Engine, runID string) (journal.Run, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := eng.Journal().Run(ctx, runID)
		switch {
		case err == nil && r.Status.Stopped():
			return r, nil
		case err != nil && !errors.Is(err, journal.ErrRunNotFound):
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("run %s did not stop: %w", runID, ctx.Err())
		case <-tick.C:
		}
	}
}

// syncWriter lets the steps and the ledger service, on goroutines of
// their own, and main print to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}
