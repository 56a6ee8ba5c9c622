package patterns_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// TestRoutePositionOutsideTheRouteIsParked: x-acemq-route-position must
// index x-acemq-route. Every position outside it (the route's length, past
// it, negative; any position on an empty route) is a malformed engine
// header, so the step's consumer parks the message in Q.parked, one rule
// for all of them (docs/wire.md, "Queues a consumer owns"), and never
// dead-letters it as though a replay could help.
func TestRoutePositionOutsideTheRouteIsParked(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		p := declarePipeline(h, "validate", "charge", "ship")
		pipelineStage(t, conn, p, "charge", func(context.Context, *broker.Message) (any, error) { return "charged", nil })
		route := []any{"validate", "charge", "ship"}
		cases := []struct {
			id      string
			headers transport.Table
			to      string // a queue, or ParkedSuffix for the step's .parked
			reason  string // the header x-acemq-error names
		}{
			{"at-charge", transport.Table{broker.HeaderRoute: route, broker.HeaderRoutePosition: int64(1)}, p.QueueFor("ship"), ""},
			{"at-length", transport.Table{broker.HeaderRoute: route, broker.HeaderRoutePosition: int64(3)}, broker.ParkedSuffix, broker.HeaderRoutePosition},
			{"past-it", transport.Table{broker.HeaderRoute: route, broker.HeaderRoutePosition: int64(99)}, broker.ParkedSuffix, broker.HeaderRoutePosition},
			{"negative", transport.Table{broker.HeaderRoute: route, broker.HeaderRoutePosition: int64(-1)}, broker.ParkedSuffix, broker.HeaderRoutePosition},
			{"short", transport.Table{broker.HeaderRoute: route, broker.HeaderRoutePosition: int16(3)}, broker.ParkedSuffix, broker.HeaderRoutePosition},
			{"empty-route", transport.Table{broker.HeaderRoute: []any{}, broker.HeaderRoutePosition: int64(0)}, broker.ParkedSuffix, broker.HeaderRoute + ":"},
			{"empty-no-position", transport.Table{broker.HeaderRoute: []any{}}, broker.ParkedSuffix, broker.HeaderRoute + ":"},
		}
		want, reasons := map[string][]string{}, map[string]string{}
		for _, tc := range cases {
			reasons[tc.id] = tc.reason
			require.NoError(t, conn.Transport().Publish(ctx, transport.Publishing{
				Exchange: p.Name(), RoutingKey: "charge", Mandatory: true,
				Message: transport.Message{MessageID: tc.id, ContentType: broker.ContentTypeJSON, Body: []byte(`{}`),
					Headers: tc.headers},
			}))
			queue := tc.to
			if queue == broker.ParkedSuffix {
				queue = p.QueueFor("charge") + broker.ParkedSuffix
			}
			want[queue] = append(want[queue], tc.id)
		}

		for queue, ids := range want {
			var got []string
			for range ids {
				d := h.Get(queue, 10*time.Second)
				if queue == p.QueueFor("ship") {
					// The hop is a new message, caused by the one published.
					got = append(got, d.Headers[broker.HeaderCausationID].(string))
					continue
				}
				got = append(got, d.MessageID)
				require.Contains(t, d.Headers[broker.HeaderError], "malformed header "+reasons[d.MessageID], "message %s", d.MessageID)
			}
			sort.Strings(ids)
			sort.Strings(got)
			require.Equal(t, ids, got, "on %s", queue)
		}
		require.Zero(t, h.Depth(p.QueueFor("charge")+broker.DeadLetterSuffix), "none is dead-lettered")
		require.Zero(t, h.Depth(p.QueueFor("charge")+broker.ParkedSuffix), "and nothing else is parked")
	})
}

// TestSlipFromRefusesPositionOutsideTheRoute: SlipFrom, given a message
// built by hand rather than received, still refuses a position outside the
// route.
func TestSlipFromRefusesPositionOutsideTheRoute(t *testing.T) {
	t.Parallel()
	for _, pos := range []int{3, 99, -1} {
		m := &broker.Message{}
		m.Route, m.RoutePosition = []string{"validate", "charge", "ship"}, pos
		_, err := patterns.SlipFrom(m)
		require.ErrorIs(t, err, patterns.ErrInvalidSlip, "position %d", pos)
	}
}
