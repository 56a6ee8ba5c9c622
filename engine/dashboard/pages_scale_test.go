package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/internal/journalbench"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// TestPagesAtAMillionRuns times the search, charts and failed pages on
// the journal benchmark's data set (journalbench.Load, 1,000,000 runs in
// tables of its own, dropped after), and checks what they show: the
// totals over every run, every failed run grouped. It loads for about a
// minute, so it runs only with ACEMQ_SCALE=1.
func TestPagesAtAMillionRuns(t *testing.T) {
	if os.Getenv("ACEMQ_SCALE") == "" {
		t.Skip("ACEMQ_SCALE=1 loads 1,000,000 runs")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	pool, tables := testTables(ctx, t, "acemq_scale")
	end := time.Now().UTC().Truncate(time.Second)
	began := time.Now()
	require.NoError(t, journalbench.Load(ctx, pool, tables, journalbench.Runs, end))
	t.Logf("loaded %d runs in %s", journalbench.Runs, time.Since(began).Round(time.Millisecond))
	j, err := persistence.NewSQLJournal(pool, persistence.SQLJournalConfig{Tables: tables})
	require.NoError(t, err)
	h, err := dashboard.New(dashboard.Config{Journal: j, Logger: testenv.Logger(t), Now: func() time.Time { return end }})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { require.NoError(t, h.Close(context.Background())) })
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		path  string
		limit time.Duration
		shows []string
	}{
		{"/?flow=flow-3&window=168h&q=" + url.QueryEscape(`payload.customer == "Ada"`), 100 * time.Millisecond, []string{`data-run="run-`}},
		{"/?q=" + url.QueryEscape(`key:order-123456`), 100 * time.Millisecond, []string{`data-run="run-00123456"`}},
		{"/?q=" + url.QueryEscape(`id:run-0012345`), 100 * time.Millisecond, []string{`data-run="run-00123450"`}},
		{"/charts?window=1h", 300 * time.Millisecond, []string{`id="totals"`}},
		{"/charts?window=24h", 300 * time.Millisecond, []string{`id="totals"`}},
		{"/charts?window=720h", 300 * time.Millisecond, []string{`id="totals"`, "1000000 runs started"}},
		{"/charts?window=720h&flow=flow-3", 300 * time.Millisecond, []string{`id="totals"`}},
		{"/failed", 300 * time.Millisecond, []string{"failed runs, grouped"}},
		{"/failed?flow=flow-3&window=168h", 300 * time.Millisecond, []string{"failed runs, grouped"}},
	} {
		var best time.Duration
		var body string
		for i := range 3 {
			began := time.Now()
			resp, err := http.Get(srv.URL + c.path)
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NoError(t, err)
			took := time.Since(began)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.path, raw)
			if i == 0 || took < best {
				best = took
			}
			body = string(raw)
		}
		t.Logf("%-70s best of 3: %s", c.path, best.Round(100*time.Microsecond))
		for _, s := range c.shows {
			require.Contains(t, body, s, c.path)
		}
		require.Less(t, best, c.limit, c.path)
		if strings.HasPrefix(c.path, "/failed?") || c.path == "/failed" {
			require.NotContains(t, body, "there are more", c.path)
		}
	}
}
