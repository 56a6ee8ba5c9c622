package broker

import "github.com/acemq/acemq-flow/broker/transport"

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

// ConsumerTopology is what consuming queue declares: the queue itself,
// dead-lettering to queue.dlq through the default exchange (so even a
// broker-side reject lands there rather than nowhere), and queue.dlq and
// queue.parked beside it.
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
