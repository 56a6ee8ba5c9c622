package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Topology values, shared with the transport layer so that one value can be
// printed, compared and applied (Conn.Declare).
type (
	// Table is an AMQP field table: headers and arguments.
	Table = transport.Table
	// Topology is a set of exchanges, queues and bindings.
	Topology = transport.Topology
	// Exchange is an exchange declaration.
	Exchange = transport.Exchange
	// Queue is a queue declaration.
	Queue = transport.Queue
	// Binding binds a queue to an exchange.
	Binding = transport.Binding
)

// Suffixes of the queues a consumer owns beside its own.
const (
	DeadLetterSuffix = ".dlq"
	ParkedSuffix     = ".parked"
)

// QuorumQueue is how this library declares every queue of its own: durable
// and quorum, with args added. Declaring a queue through anything else
// risks PRECONDITION_FAILED from a broker that already has it with other
// arguments.
func QuorumQueue(name string, args Table) Queue {
	a := Table{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	return Queue{Name: name, Durable: true, Args: a}
}

// DefaultDeliveryLimit is the x-delivery-limit of a consumer's queue unless
// ConsumerQueues says otherwise: RabbitMQ 4's own default for quorum queues.
const DefaultDeliveryLimit = 20

// ConsumerQueues configures the queues a consumer owns (a config struct: the
// zero value is the defaults). Consume declares them with the defaults; a
// deployment that wants others declares ConsumerQueues{...}.Topology(queue)
// itself and consumes with Existing.
type ConsumerQueues struct {
	// DeliveryLimit is the queue's x-delivery-limit: how many times the
	// broker takes a message back unsettled (a consumer's connection or
	// process died holding it, a nack with requeue) before it dead-letters
	// it to queue.dlq instead of delivering it again. It is what ends a
	// message that kills every consumer it reaches, such as one whose
	// headers the client library cannot read. 0 means DefaultDeliveryLimit;
	// a negative value declares no limit (such a message is then delivered
	// for ever).
	DeliveryLimit int
}

// Topology is what consuming queue declares: the queue itself with its
// delivery limit, dead-lettering to queue.dlq through the default exchange
// (so even a broker-side reject lands there rather than nowhere), and
// queue.dlq and queue.parked beside it. These two have no delivery limit:
// without a dead-letter exchange of their own, the broker would drop what
// went past it.
func (c ConsumerQueues) Topology(queue string) Topology {
	args := Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue + DeadLetterSuffix,
	}
	switch {
	case c.DeliveryLimit == 0:
		args[argDeliveryLimit] = int64(DefaultDeliveryLimit)
	case c.DeliveryLimit > 0:
		args[argDeliveryLimit] = int64(c.DeliveryLimit)
	}
	return Topology{Queues: []Queue{
		QuorumQueue(queue, args),
		QuorumQueue(queue+DeadLetterSuffix, nil),
		QuorumQueue(queue+ParkedSuffix, nil),
	}}
}

// ConsumerTopology is what consuming queue declares: ConsumerQueues with
// its defaults.
func ConsumerTopology(queue string) Topology { return ConsumerQueues{}.Topology(queue) }

// argDeliveryLimit is the quorum queue argument ConsumerQueues sets.
const argDeliveryLimit = "x-delivery-limit"

// withoutRefusedDeliveryLimit undoes what adding the delivery limit breaks:
// RabbitMQ refuses (406) a declaration with an x-delivery-limit the existing
// queue does not have, and a queue declared by an earlier version of this
// library, or by an AceMQ library that does not set one, has none. When err
// is that refusal for a queue of t, it returns t with the argument dropped
// from that queue, and the queue's name. It reads the broker's reason
// ("inequivalent arg 'x-delivery-limit' for queue 'Q' in vhost '/': received
// ... but current is none"), which the loopback words the same way: AMQP
// says nothing more structured.
func withoutRefusedDeliveryLimit(t Topology, err error) (Topology, string, bool) {
	var ae *transport.AMQPError
	if !errors.As(err, &ae) || ae.Code != transport.PreconditionFailed ||
		!strings.Contains(ae.Reason, "inequivalent arg '"+argDeliveryLimit+"'") || !strings.HasSuffix(ae.Reason, "but current is none") {
		return t, "", false
	}
	for i, q := range t.Queues {
		if _, ok := q.Args[argDeliveryLimit]; !ok || !strings.Contains(ae.Reason, "for queue '"+q.Name+"' in vhost") {
			continue
		}
		out := t
		out.Queues = slices.Clone(t.Queues)
		q.Args = q.Args.Clone()
		delete(q.Args, argDeliveryLimit)
		out.Queues[i] = q
		return out, q.Name, true
	}
	return t, "", false
}

// QueueTypeError is a declaration of a queue RabbitMQ replicates (a stream
// or a quorum queue) that is transient, exclusive or auto-delete: RabbitMQ
// replicates only durable queues that outlive the connection and consumers
// that made them. Conn.Declare returns it before anything is sent, rather
// than leaving the broker to refuse it with a bare PRECONDITION_FAILED.
type QueueTypeError struct {
	// Queue is the queue's name.
	Queue string
	// Type is its x-queue-type: "stream" or "quorum".
	Type string
	// Wrong is what the declaration asks for that the type cannot be, in
	// this order: "transient", "exclusive", "auto-delete".
	Wrong []string
}

// Error names the queue, its type and what is wrong with it.
func (e *QueueTypeError) Error() string {
	wrong := strings.Join(e.Wrong, ", ")
	if i := strings.LastIndex(wrong, ", "); i >= 0 {
		wrong = wrong[:i] + " and " + wrong[i+2:]
	}
	return fmt.Sprintf("queue %q cannot be a %s queue while it is %s: RabbitMQ only replicates durable queues that outlive their connection and consumers",
		e.Queue, e.Type, wrong)
}

// checkQueueTypes returns a *QueueTypeError for the first queue of t that
// RabbitMQ could not replicate.
func checkQueueTypes(t Topology) error {
	for _, q := range t.Queues {
		typ, _ := q.Args["x-queue-type"].(string)
		if typ != "stream" && typ != "quorum" {
			continue
		}
		var wrong []string
		if !q.Durable {
			wrong = append(wrong, "transient")
		}
		if q.Exclusive {
			wrong = append(wrong, "exclusive")
		}
		if q.AutoDelete {
			wrong = append(wrong, "auto-delete")
		}
		if len(wrong) > 0 {
			return &QueueTypeError{Queue: q.Name, Type: typ, Wrong: wrong}
		}
	}
	return nil
}
