package dashboardtest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline/timelinetest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// Forked serves a dashboard of cfg on a memory journal holding run runID
// of a ForEach over items items, given up at item failAt (every item
// arrived when failAt is items or more), as timelinetest.ForkRun records
// it a minute ago, with the ForEach's join (failed, when an item was
// given up); both go when the test ends.
func Forked(tb testing.TB, runID string, items, failAt int, cfg dashboard.Config) *httptest.Server {
	tb.Helper()
	j, err := journal.NewMemory(0)
	require.NoError(tb, err)
	ctx := context.Background()
	require.NoError(tb, j.Record(ctx, timelinetest.ForkRun(runID, "unit.shop", items, failAt, time.Now().Add(-time.Minute))))
	_, _, err = j.OpenJoin(ctx, journal.Join{RunID: runID, Key: "0/2/each", Total: items, Limit: min(4, items)}, make([][]byte, items))
	require.NoError(tb, err)
	if failAt < items {
		require.NoError(tb, j.FailJoin(ctx, runID, "0/2/each"))
	}
	cfg.Journal, cfg.Logger = j, testenv.Logger(tb)
	h, err := dashboard.New(cfg)
	require.NoError(tb, err)
	srv := httptest.NewServer(h)
	tb.Cleanup(func() { require.NoError(tb, h.Close(context.Background())) })
	tb.Cleanup(srv.Close)
	return srv
}
