package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// ErrEmptyQueueName is returned by Declare for a queue without a name: the
// broker would invent one that nobody could learn or declare again after a
// reconnect.
var ErrEmptyQueueName = errors.New("rabbitmq: queue name is empty")

// Declare declares the exchanges, queues and bindings of topo in that order
// on a short-lived channel and records each one the broker accepted, so that
// every new connection declares them again. It refuses argument tables that
// are not AMQP field values and queues without a name; an exception from the
// broker (for example 406 PRECONDITION_FAILED for a queue that exists with
// other arguments) is an *transport.AMQPError.
func (t *Transport) Declare(ctx context.Context, topo transport.Topology) error {
	if err := validateTopology(topo); err != nil {
		return fmt.Errorf("rabbitmq: declare: %w", err)
	}
	err := t.withChannel(ctx, func(s *session, ch *amqp.Channel) error {
		if err := declare(ch, topo, &t.topo); err != nil {
			return err
		}
		if s.isLost() {
			// The reconnect may have read the record before this declaration
			// reached it; declaring again is harmless.
			return errRetry
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: declare: %w", err)
	}
	return nil
}

func validateTopology(topo transport.Topology) error {
	for _, e := range topo.Exchanges {
		if err := e.Args.Validate(); err != nil {
			return fmt.Errorf("exchange %q arguments: %w", e.Name, err)
		}
	}
	for _, q := range topo.Queues {
		if q.Name == "" {
			return ErrEmptyQueueName
		}
		if err := q.Args.Validate(); err != nil {
			return fmt.Errorf("queue %q arguments: %w", q.Name, err)
		}
	}
	for _, b := range topo.Bindings {
		if err := b.Args.Validate(); err != nil {
			return fmt.Errorf("binding %q -> %q arguments: %w", b.Exchange, b.Queue, err)
		}
	}
	return nil
}

// declare declares everything in topo on ch, recording each success in rec.
func declare(ch *amqp.Channel, topo transport.Topology, rec *topologyRecord) error {
	for _, e := range topo.Exchanges {
		if err := declareExchange(ch, e); err != nil {
			return err
		}
		rec.addExchange(e)
	}
	for _, q := range topo.Queues {
		if err := declareQueue(ch, q); err != nil {
			return err
		}
		rec.addQueue(q)
	}
	for _, b := range topo.Bindings {
		if err := declareBinding(ch, b); err != nil {
			return err
		}
		rec.addBinding(b)
	}
	return nil
}

func declareExchange(ch *amqp.Channel, e transport.Exchange) error {
	if err := ch.ExchangeDeclare(e.Name, e.Kind, e.Durable, e.AutoDelete, e.Internal, false, toTable(e.Args)); err != nil {
		return fmt.Errorf("exchange %q: %w", e.Name, mapError(err))
	}
	return nil
}

func declareQueue(ch *amqp.Channel, q transport.Queue) error {
	if _, err := ch.QueueDeclare(q.Name, q.Durable, q.AutoDelete, q.Exclusive, false, toTable(q.Args)); err != nil {
		return fmt.Errorf("queue %q: %w", q.Name, mapError(err))
	}
	return nil
}

func declareBinding(ch *amqp.Channel, b transport.Binding) error {
	if err := ch.QueueBind(b.Queue, b.Key, b.Exchange, false, toTable(b.Args)); err != nil {
		return fmt.Errorf("binding %q -> %q key %q: %w", b.Exchange, b.Queue, b.Key, mapError(err))
	}
	return nil
}

// Inspect declares queue passively and reports its ready messages and
// consumers; a queue that does not exist is an *transport.AMQPError with
// code transport.NotFound.
func (t *Transport) Inspect(ctx context.Context, queue string) (transport.QueueState, error) {
	var st transport.QueueState
	err := t.withChannel(ctx, func(_ *session, ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		if err != nil {
			return err
		}
		st = transport.QueueState{Name: q.Name, Messages: q.Messages, Consumers: q.Consumers}
		return nil
	})
	if err != nil {
		return transport.QueueState{}, fmt.Errorf("rabbitmq: inspect queue %q: %w", queue, err)
	}
	return st, nil
}

// Purge removes every ready message from queue and says how many; a queue
// that does not exist is an *transport.AMQPError with code
// transport.NotFound.
func (t *Transport) Purge(ctx context.Context, queue string) (int, error) {
	var n int
	err := t.withChannel(ctx, func(_ *session, ch *amqp.Channel) error {
		var err error
		n, err = ch.QueuePurge(queue, false)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: purge queue %q: %w", queue, err)
	}
	return n, nil
}

// DeleteQueue deletes queue whatever it holds, says how many messages went
// with it, and forgets it and its bindings for redeclaration. A queue that
// does not exist is not an error.
func (t *Transport) DeleteQueue(ctx context.Context, queue string) (int, error) {
	var n int
	err := t.withChannel(ctx, func(_ *session, ch *amqp.Channel) error {
		var err error
		n, err = ch.QueueDelete(queue, false, false, false)
		if transport.IsCode(mapError(err), transport.NotFound) {
			n, err = 0, nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: delete queue %q: %w", queue, err)
	}
	t.topo.forgetQueue(queue)
	return n, nil
}

// DeleteExchange deletes exchange and forgets it and its bindings for
// redeclaration. An exchange that does not exist is not an error.
func (t *Transport) DeleteExchange(ctx context.Context, exchange string) error {
	err := t.withChannel(ctx, func(_ *session, ch *amqp.Channel) error {
		err := ch.ExchangeDelete(exchange, false, false)
		if transport.IsCode(mapError(err), transport.NotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: delete exchange %q: %w", exchange, err)
	}
	t.topo.forgetExchange(exchange)
	return nil
}

// Unbind removes binding b and forgets it for redeclaration. It refuses
// argument tables that are not AMQP field values.
func (t *Transport) Unbind(ctx context.Context, b transport.Binding) error {
	if err := b.Args.Validate(); err != nil {
		return fmt.Errorf("rabbitmq: unbind: %w", err)
	}
	err := t.withChannel(ctx, func(_ *session, ch *amqp.Channel) error {
		return ch.QueueUnbind(b.Queue, b.Key, b.Exchange, toTable(b.Args))
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: unbind %q -> %q key %q: %w", b.Exchange, b.Queue, b.Key, err)
	}
	t.topo.forgetBinding(b)
	return nil
}
