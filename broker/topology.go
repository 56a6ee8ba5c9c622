package broker

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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

// ConsumerTopology is what consuming queue declares (docs/wire.md, "Queues
// a consumer owns"): the queue itself, dead-lettering to queue.dlq through
// the default exchange (so even a broker-side reject lands there rather
// than nowhere), and queue.dlq and queue.parked beside it. The queue
// carries exactly these arguments, as every AceMQ library declares it:
// RabbitMQ compares every argument on a redeclaration, so one more (an
// x-delivery-limit, say) would make whichever service declares it second
// fail. Its delivery limit is the operator's: DeliveryLimitPolicy.
func ConsumerTopology(queue string) Topology {
	return Topology{Queues: []Queue{
		QuorumQueue(queue, Table{
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": queue + DeadLetterSuffix,
		}),
		QuorumQueue(queue+DeadLetterSuffix, nil),
		QuorumQueue(queue+ParkedSuffix, nil),
	}}
}

// argDeliveryLimit is the quorum queue argument earlier versions of this
// library declared consumer queues with.
const argDeliveryLimit = "x-delivery-limit"

// refusedForDeliveryLimit reads the broker's refusal of a declaration that
// leaves out the x-delivery-limit an existing queue has ("inequivalent arg
// 'x-delivery-limit' for queue 'Q' in vhost '/': received none but current
// is the value '20' of type 'long'"), which the loopback words the same
// way: AMQP says nothing more structured. The value is any AMQP integer.
var refusedForDeliveryLimit = regexp.MustCompile(`^PRECONDITION_FAILED - inequivalent arg '` + argDeliveryLimit +
	`' for queue '(.*)' in vhost '.*': received none but current is the value '(-?[0-9]+)' of type '(?:byte|short|signedint|long|unsignedbyte|unsignedshort|unsignedint)'$`)

// withExistingDeliveryLimit tolerates a consumer queue declared by an
// earlier version of this library, which gave it x-delivery-limit: when
// err is the broker's refusal to declare a queue of t without the limit
// it has, it returns t with that queue declared as it exists (with its
// limit, as a long: RabbitMQ compares integers of any width by value), the
// queue's name and the limit.
func withExistingDeliveryLimit(t Topology, err error) (Topology, string, int64, bool) {
	var ae *transport.AMQPError
	if !errors.As(err, &ae) || ae.Code != transport.PreconditionFailed {
		return t, "", 0, false
	}
	m := refusedForDeliveryLimit.FindStringSubmatch(ae.Reason)
	if m == nil {
		return t, "", 0, false
	}
	limit, perr := strconv.ParseInt(m[2], 10, 64)
	if perr != nil {
		return t, "", 0, false
	}
	for i, q := range t.Queues {
		if _, ok := q.Args[argDeliveryLimit]; ok || q.Name != m[1] {
			continue
		}
		out := t
		out.Queues = slices.Clone(t.Queues)
		q.Args = q.Args.Clone()
		if q.Args == nil {
			q.Args = Table{}
		}
		q.Args[argDeliveryLimit] = limit
		out.Queues[i] = q
		return out, q.Name, limit, true
	}
	return t, "", 0, false
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
