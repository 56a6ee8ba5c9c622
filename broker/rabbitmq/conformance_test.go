package rabbitmq_test

import (
	"testing"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/broker/transport/transporttest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		// The suite closes what it opens; open's own cleanup then finds it
		// closed, which Close allows.
		return open(t, rabbitmq.Config{PublishChannels: 2})
	})
}
