package workflows_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// demoOutput is what the demo prints, its run ids, clock times and
// durations replaced (normalize).
const demoOutput = `acemq-flow demo: four orders through the place-order flow, on the embedded in-process broker
flow FLOW: validate → charge → reserve [reserve-stock ∥ book-courier] (when payload.digital == false) → (wait until payload.ship_at) → ship (when payload.digital == false)
each run's timeline is read back from the run journal; times are since the run started

run 1: an order that goes straight through
  order o-1001: Ada, 2 x coffee beans to 12 Harbour Street, Bristol, card •••• 4242; run id RUN
    +T  start      the run starts
    +T  validate   completed
    +T  charge     completed
    +T  reserve    forked: 2 branches
    +T  reserve-stock completed
    +T  book-courier completed
    +T  reserve    branch 0 arrived
    +T  reserve    branch 1 arrived
    +T  reserve    completed
    +T  ship       completed
  → completed after T

run 2: an e-book, nothing to reserve or ship; the payment gateway times out once and charge is retried
  order o-1002: Grace, 1 x e-book, card •••• 0119; run id RUN
    +T  start      the run starts
    +T  validate   completed
    +T  charge     attempt 1 failed, retried in 1s: charge 1200 cents: payment gateway timed out
    +T  charge     completed on attempt 2
    +T  reserve    skipped: payload.digital == false is false
    +T  ship       skipped: payload.digital == false is false
  → completed after T

run 3: the courier does not deliver to Atlantis, after the card was charged
  order o-1003: Linus, 1 x desk lamp to 1 Coral Way, Atlantis, card •••• 4242; run id RUN
    +T  start      the run starts
    +T  validate   completed
    +T  charge     completed
    +T  reserve    forked: 2 branches
    +T  reserve-stock completed
    +T  book-courier attempt 1 failed, given up: book a courier: fatal: courier: no deliveries to "1 Coral Way, Atlantis"
    +T  reserve    branch 0 arrived
  the run is failed, held for a replay until HH:MM:SS, then compensated; an operator replays it or compensates it now, as the demo does:
    $ acemq-flow compensate RUN
    its message moved from FLOW.book-courier.dlq to FLOW.compensate, where a worker starts the compensations
    +T  compensate started on request
    +T  reserve-stock compensated: the stock released
    +T  charge     compensated: the payment refunded
  → compensated after T

run 4: an order to ship at HH:MM:SS, a few seconds after it is placed
  order o-1004: Barbara, 1 x teapot to 7 Mill Lane, Leeds, card •••• 4242; run id RUN
    +T  start      the run starts
    +T  validate   completed
    +T  charge     completed
    +T  reserve    forked: 2 branches
    +T  reserve-stock completed
    +T  book-courier completed
    +T  reserve    branch 0 arrived
    +T  reserve    branch 1 arrived
    +T  reserve    completed
    +T  ship       waits on the scheduler ladder until HH:MM:SS (payload.ship_at)
    +T  ship       completed
  → completed after T

summary: run 1 completed, run 2 completed, run 3 compensated, run 4 completed
the demo deletes its queues, exchange FLOW and ladder LADDER as it ends
`

var (
	runIDs    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	clockTime = regexp.MustCompile(`\b\d\d:\d\d:\d\d\b`)
	elapsed   = regexp.MustCompile(`\b\d+\.\ds\b`)
	offsets   = regexp.MustCompile(`(?m)^ +\+\d+\.\ds  `)
)

// normalize replaces what changes from one demo to the next.
func normalize(out, flow, ladder string) string {
	out = runIDs.ReplaceAllString(out, "RUN")
	out = clockTime.ReplaceAllString(out, "HH:MM:SS")
	out = offsets.ReplaceAllString(out, "    +T  ")
	out = elapsed.ReplaceAllString(out, "T")
	out = strings.ReplaceAll(out, flow, "FLOW")
	return strings.ReplaceAll(out, ladder, "LADDER")
}

// requireGone fails the test if any of the queues or the exchange exists.
func requireGone(t *testing.T, conn *broker.Conn, exchange string, queues ...string) {
	t.Helper()
	for _, q := range queues {
		_, err := conn.Transport().Inspect(t.Context(), q)
		require.True(t, transport.IsCode(err, transport.NotFound), "queue %s should have been deleted: %v", q, err)
	}
	// Declaring an exchange passively is not in the transport: a
	// mandatory publish to it is refused only while it is missing.
	err := conn.Publish(t.Context(), "x", broker.ToExchange(exchange), broker.To("validate"), broker.Mandatory())
	require.Error(t, err, "exchange %s should have been deleted", exchange)
}

// demoQueues are the queues the demo of flow declares, and its ladder's.
func demoQueues(flow, ladder string) []string {
	var qs []string
	for _, q := range []string{"validate", "charge", "reserve", "ship", "compensate", "compensate.charge", "compensate.reserve"} {
		qs = append(qs, flow+"."+q, flow+"."+q+broker.DeadLetterSuffix, flow+"."+q+broker.ParkedSuffix)
	}
	for _, q := range broker.LadderTopology(ladder).Queues {
		qs = append(qs, q.Name)
	}
	return qs
}

// TestDemo runs the demo twice on one embedded broker: each time it
// prints the same four timelines, takes a few seconds, and leaves nothing
// behind.
func TestDemo(t *testing.T) {
	t.Parallel()
	url := "memory://" + testenv.Name(t, "demo")
	admin, err := broker.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close(context.Background())) })
	for range 2 {
		var out bytes.Buffer
		began := time.Now()
		err := workflows.DemoConfig{URL: url, Logger: testenv.Logger(t), Timeout: time.Minute}.Run(t.Context(), &out)
		t.Log("\n" + out.String())
		require.NoError(t, err)
		require.Less(t, time.Since(began), 15*time.Second)
		require.Equal(t, demoOutput, normalize(out.String(), workflows.DefaultDemoFlow, workflows.DefaultDemoLadder))
		requireGone(t, admin, workflows.DefaultDemoFlow, demoQueues(workflows.DefaultDemoFlow, workflows.DefaultDemoLadder)...)
	}
}

// TestDemoOnTheBareEmbeddedBroker: with no URL the demo runs on a broker
// of its own.
func TestDemoOnTheBareEmbeddedBroker(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, workflows.DemoConfig{Logger: testenv.Logger(t), Timeout: time.Minute}.Run(t.Context(), &out))
	require.Equal(t, demoOutput, normalize(out.String(), workflows.DefaultDemoFlow, workflows.DefaultDemoLadder))
}

func TestDemoOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitURL(t)
	cfg := workflows.DemoConfig{URL: url, Ladder: testenv.Name(t, "ladder"), Flow: testenv.Name(t, "place-order"),
		Logger: testenv.Logger(t), Timeout: time.Minute}
	var out bytes.Buffer
	err := cfg.Run(t.Context(), &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.NotContains(t, out.String(), "guest:guest", "the password is never printed")
	want := strings.Replace(demoOutput, "on the embedded in-process broker", "on amqp://guest@127.0.0.1:5672/, scheduler ladder LADDER", 1)
	require.Equal(t, want, normalize(out.String(), cfg.Flow, cfg.Ladder))

	admin, err := broker.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close(context.Background())) })
	requireGone(t, admin, cfg.Flow, demoQueues(cfg.Flow, cfg.Ladder)...)
}

// TestDemoRefusesALadderNotItsOwn: the demo deletes its ladder, so it
// will not run on one that may be another process's, and leaves that one
// alone.
func TestDemoRefusesALadderNotItsOwn(t *testing.T) {
	t.Parallel()
	url := "memory://" + testenv.Name(t, "demo")
	other := testenv.Name(t, "ladder")
	conn, err := broker.Config{Ladder: other}.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	require.NoError(t, conn.DeclareLadder(t.Context()))

	err = workflows.DemoConfig{URL: url, Ladder: other, Logger: testenv.Logger(t)}.Run(t.Context(), &bytes.Buffer{})
	require.ErrorContains(t, err, "exists already")
	_, err = conn.Transport().Inspect(t.Context(), other+broker.DueSuffix)
	require.NoError(t, err, "the ladder is left alone")

	err = workflows.DemoConfig{Ladder: broker.DefaultLadder}.Run(t.Context(), &bytes.Buffer{})
	require.ErrorContains(t, err, "every worker's")
}

func TestDemoRefusesBadInput(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, workflows.DemoConfig{Timeout: -time.Second}.Run(t.Context(), &bytes.Buffer{}), "timeout")
	require.ErrorContains(t, workflows.DemoConfig{}.Run(t.Context(), nil), "nil output writer")
	require.ErrorIs(t, workflows.DemoConfig{URL: "::"}.Run(t.Context(), &bytes.Buffer{}), broker.ErrInvalidURL)
}

// TestDemoGivesUpAtItsTimeout: a demo out of time says which run it was
// waiting for, and still deletes what it declared.
func TestDemoGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	url := "memory://" + testenv.Name(t, "demo")
	// Run 4 waits three seconds for its ship_at, so some run cannot end
	// in time (on a loaded machine an earlier one may be the first).
	err := workflows.DemoConfig{URL: url, Timeout: 1500 * time.Millisecond, Logger: testenv.Logger(t)}.Run(t.Context(), &bytes.Buffer{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Regexp(t, `^demo: run [1-4] \(\S+\) did not end: `, err.Error())
	admin, err := broker.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close(context.Background())) })
	requireGone(t, admin, workflows.DefaultDemoFlow, demoQueues(workflows.DefaultDemoFlow, workflows.DefaultDemoLadder)...)
}
