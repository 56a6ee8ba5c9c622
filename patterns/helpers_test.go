package patterns_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// declarePipeline declares a pipeline with a unique name on h's broker and
// deletes its exchange and its steps' queues (with their .dlq and .parked)
// when the test ends.
func declarePipeline(h *brokertest.Harness, steps ...string) *patterns.Pipeline {
	h.T.Helper()
	p, err := patterns.NewPipeline(testenv.Name(h.T, "pipeline"), steps...)
	require.NoError(h.T, err)
	require.NoError(h.T, h.Admin.Declare(brokertest.Ctx(h.T), p.Topology()))
	for _, s := range steps {
		q := p.QueueFor(s)
		h.DeleteLater(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
	}
	h.DeleteExchangeLater(p.Name())
	return p
}
