package broker

import (
	"regexp"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
)

// DeliveryLimit is the delivery limit DeliveryLimitPolicy gives consumer
// queues: RabbitMQ 4's own default for quorum queues, so that a deployment
// on RabbitMQ 3 with the policy behaves as one on RabbitMQ 4 without it.
const DeliveryLimit = 20

// DeliveryLimitPolicyName names DeliveryLimitPolicy's policy in its virtual
// host: setting it again replaces it, and no other policy.
const DeliveryLimitPolicyName = "acemq-delivery-limit"

// DeliveryLimitPolicy is the operator's policy (docs/operations.md) that
// gives the consumer queues of a virtual host whose scheduler ladder is
// named ladder their delivery limit: how many times the broker takes a
// message back unsettled (its consumer's connection or process died
// holding it, a nack with requeue) before it dead-letters it to Q.dlq
// instead of delivering it again. That ends a message which kills every
// consumer it reaches, such as one whose headers amqp091-go cannot read.
// It is a policy, never a queue argument, because the other AceMQ
// libraries declare Q without one (docs/wire.md).
//
// Its pattern matches every queue name except Q.dlq, Q.parked and the
// ladder's queues (ladder.*). Q.dlq, Q.parked and the ladder's control
// queue have no dead-letter exchange, so the broker would drop what went
// past a limit there; the rungs have no consumer to take anything back.
// RabbitMQ applies no policy defining delivery-limit to a stream.
func DeliveryLimitPolicy(ladder string) rabbitmq.Policy {
	return rabbitmq.Policy{
		Name: DeliveryLimitPolicyName,
		Pattern: `^(?!` + regexp.QuoteMeta(ladder+".") + `).*(?<!` + regexp.QuoteMeta(DeadLetterSuffix) + `)(?<!` +
			regexp.QuoteMeta(ParkedSuffix) + `)$`,
		ApplyTo:    "queues",
		Definition: map[string]any{"delivery-limit": DeliveryLimit},
	}
}
