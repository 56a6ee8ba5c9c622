package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRungFor(t *testing.T) {
	t.Parallel()
	cases := []struct {
		remaining time.Duration
		want      string
	}{
		{-time.Second, ".due"},
		{0, ".due"},
		{time.Millisecond, ".1s"},
		{999 * time.Millisecond, ".1s"},
		{time.Second, ".1s"},
		{9 * time.Second, ".1s"},
		{10 * time.Second, ".10s"},
		{59 * time.Second, ".10s"},
		{90 * time.Second, ".1m"},
		{10 * time.Minute, ".10m"},
		{59 * time.Minute, ".10m"},
		{4 * time.Hour, ".1h"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, RungFor(c.remaining), "remaining %s", c.remaining)
	}
}

// TestLadderHops walks the contract's examples: 90 s is 1m + 10s + 10s + 10s
// (four hops) and 4 h is four 1h hops, never overshooting.
func TestLadderHops(t *testing.T) {
	t.Parallel()
	walk := func(d time.Duration) []string {
		var hops []string
		for d > 0 {
			r := RungFor(d)
			hops = append(hops, r)
			for _, rung := range LadderRungs() {
				if rung.Suffix == r {
					require.LessOrEqual(t, rung.TTL, max(d, time.Second), "rung %s overshoots %s", r, d)
					d -= rung.TTL
				}
			}
		}
		return hops
	}
	require.Equal(t, []string{".1m", ".10s", ".10s", ".10s"}, walk(90*time.Second))
	require.Equal(t, []string{".1h", ".1h", ".1h", ".1h"}, walk(4*time.Hour))
}

func TestLadderTopologyMatchesContract(t *testing.T) {
	t.Parallel()
	top := LadderTopology(DefaultLadder)
	require.Len(t, top.Exchanges, 1)
	require.Equal(t, Exchange{Name: "acemq.schedule", Kind: "direct", Durable: true}, top.Exchanges[0])
	ttl := map[string]int64{}
	for _, q := range top.Queues {
		require.True(t, q.Durable, q.Name)
		require.Equal(t, "quorum", q.Args["x-queue-type"], q.Name)
		if q.Name == "acemq.schedule.due" {
			require.NotContains(t, q.Args, "x-dead-letter-exchange")
			continue
		}
		ttl[q.Name] = q.Args["x-message-ttl"].(int64)
		require.Equal(t, "acemq.schedule", q.Args["x-dead-letter-exchange"], q.Name)
		require.Equal(t, "acemq.schedule.due", q.Args["x-dead-letter-routing-key"], q.Name)
		require.Equal(t, "at-least-once", q.Args["x-dead-letter-strategy"], q.Name)
		require.Equal(t, "reject-publish", q.Args["x-overflow"], q.Name)
	}
	require.Equal(t, map[string]int64{
		"acemq.schedule.1h": 3600000, "acemq.schedule.10m": 600000, "acemq.schedule.1m": 60000,
		"acemq.schedule.10s": 10000, "acemq.schedule.1s": 1000,
	}, ttl)
	require.Len(t, top.Bindings, 6)
	for _, b := range top.Bindings {
		require.Equal(t, "acemq.schedule", b.Exchange)
		require.Equal(t, b.Queue, b.Key, "every queue is bound under its own name")
	}
}

// TestLadderRungsIsACopy: the contract's ladder cannot be changed through
// what LadderRungs hands out (a user who empties or nils it must not make
// the control consumer panic or hop into a rung that does not exist).
func TestLadderRungsIsACopy(t *testing.T) {
	t.Parallel()
	r := LadderRungs()
	r[len(r)-1] = Rung{}
	clear(r)
	require.Equal(t, ".1s", RungFor(300*time.Millisecond))
	require.Equal(t, ".1h", RungFor(2*time.Hour))
	require.Len(t, LadderRungs(), 5)
	require.Equal(t, Rung{Suffix: ".1s", TTL: ShortestRung}, LadderRungs()[4])
}

// TestDueMillisRoundsUp: a due time is carried in whole milliseconds,
// rounded up, so that the ladder never releases a message before it.
func TestDueMillisRoundsUp(t *testing.T) {
	base := time.UnixMilli(1_796_214_380_899)
	for _, tc := range []struct {
		name string
		due  time.Time
		want int64
	}{
		{"a whole millisecond", base, 1_796_214_380_899},
		{"a nanosecond past it", base.Add(time.Nanosecond), 1_796_214_380_900},
		{"just before the next", base.Add(time.Millisecond - time.Nanosecond), 1_796_214_380_900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DueMillis(tc.due)
			require.Equal(t, tc.want, got)
			require.False(t, time.UnixMilli(got).Before(tc.due), "never before due")
		})
	}
}
