package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestFlowExternal runs the example on RabbitMQ, with a flow name and a
// ladder of the test's own, and checks the step the plain client served
// was taken back by the engine.
func TestFlowExternal(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		name := testenv.Name(t, "invoice")
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), h.URL, name, h.Ladder, &out))
		require.Equal(t, `starting a run of FLOW: draft (Go) → sign (the ledger service, plain AMQP) → send (Go)
draft (Go): invoice INV-1042, 12900 cents for Barbara
sign (ledger service): signed INV-1042; passing the run on to send (x-acemq-route-position 1 → 2)
send (Go): invoice INV-1042, signed "ledger/2026/1042", sent to Barbara
the journal says: the run is completed; its timeline:
  start          started
  step     draft completed
  handoff  sign  handed off
  step     sign  completed
  step     send  completed
`, strings.ReplaceAll(out.String(), name, "FLOW"))
		for _, q := range []string{name + ".draft", name + ".sign", name + ".send", name + ".sign.dlq", name + ".compensate"} {
			_, err := h.Admin.Transport().Inspect(t.Context(), q)
			require.True(t, transport.IsCode(err, transport.NotFound), "queue %s should have been deleted: %v", q, err)
		}
	})
}
