package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// TestExportRunsPagesThroughTheJournal: runs export reads a page at a
// time and writes every run chosen once, newest first, runs started in
// one instant across a page's end included; CSV has its header and a row
// a run, JSON lines a document a run, inputs masked by the secrets given.
func TestExportRunsPagesThroughTheJournal(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var want []string
	for i := range 50 {
		// Every five runs share a start time: pages of 7 end inside them.
		at := base.Add(time.Duration(i/5) * time.Second)
		id := fmt.Sprintf("r-%02d", i)
		flow := "shop"
		if i%10 == 3 {
			flow = "other"
		}
		require.NoError(t, j.Record(context.Background(), []journal.Event{{RunID: id, Flow: flow, Key: "start", Kind: journal.KindStart,
			Outcome: "started", StartedAt: at, EndedAt: at, Status: journal.Running, RunStep: "a",
			Input: json.RawMessage(`{"card":"4242 4242 4242 4242","n":` + fmt.Sprint(i) + `}`)}}))
		want = append(want, id)
	}
	secrets := map[string][]string{"shop": {"card"}}

	var out bytes.Buffer
	var told []int
	n, err := exportRuns(context.Background(), j, journal.Query{Limit: 7}, nil, 0, exportCSV, secrets, &out, func(n int) { told = append(told, n) })
	require.NoError(t, err)
	require.Equal(t, 50, n)
	require.Equal(t, 50, told[len(told)-1])
	require.Greater(t, len(told), 7, "told after each page")
	rows, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Equal(t, csvHeader, rows[0])
	require.Len(t, rows, 51)
	var got []string
	seen := map[string]bool{}
	for _, row := range rows[1:] {
		require.Len(t, row, len(csvHeader))
		require.False(t, seen[row[0]], "run %s written twice", row[0])
		seen[row[0]] = true
		got = append(got, row[0])
		if row[1] == "shop" {
			require.Contains(t, row[13], `"card":"•••• 4242"`)
		} else {
			require.Contains(t, row[13], `"card":"4242 4242 4242 4242"`, "no secrets for the flow")
		}
		require.Equal(t, "running", row[2])
		require.Equal(t, "0", row[12])
	}
	require.ElementsMatch(t, want, got)
	for i := 1; i < len(rows)-1; i++ {
		require.GreaterOrEqual(t, rows[i][7], rows[i+1][7], "newest first")
	}

	out.Reset()
	w, err := journal.ParseWhere(`payload.n >= 40`)
	require.NoError(t, err)
	n, err = exportRuns(context.Background(), j, journal.Query{Flow: "shop", Limit: 4}, w, 3, exportJSONL, nil, &out, func(int) {})
	require.NoError(t, err)
	require.Equal(t, 3, n, "--limit")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	for _, l := range lines {
		var r journal.Run
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		require.Equal(t, "shop", r.Flow)
		require.Contains(t, string(r.Input), "4242 4242 4242 4242", "nil secrets: --reveal")
	}
}

// TestRunsExportCommand: runs export writes CSV or JSON lines to stdout
// or --out, the card of place-order masked unless --reveal, and says the
// count on stderr; an unknown format is refused.
func TestRunsExportCommand(t *testing.T) {
	t.Parallel()
	testenv.DatabaseURL(t)
	inv := invocation{env: map[string]string{"ACEMQ_DATABASE_URL": testSchema(t)}, flows: workflows.Flows()}
	r := executeWith(t, inv, "migrate")
	require.Zero(t, r.code, r.stderr)
	payload, err := json.Marshal(workflows.ExampleOrder())
	require.NoError(t, err)
	for _, id := range []string{"export-1", "export-2"} {
		r = executeWith(t, inv, "start", workflows.PlaceOrderName, "--url", "memory://", "--run-id", id, "--payload", string(payload))
		require.Zero(t, r.code, r.stderr)
	}

	r = executeWith(t, inv, "runs", "export")
	require.Zero(t, r.code, r.stderr)
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, csvHeader, rows[0])
	require.Len(t, rows, 3)
	require.ElementsMatch(t, []string{"export-1", "export-2"}, []string{rows[1][0], rows[2][0]})
	require.Equal(t, workflows.PlaceOrderName, rows[1][1])
	require.NotContains(t, r.stdout, workflows.CardApproved)
	require.Contains(t, rows[1][13], `"card":"•••• 4242"`)
	require.Contains(t, r.stderr, "exported 2 runs to stdout")

	file := filepath.Join(t.TempDir(), "runs.jsonl")
	r = executeWith(t, inv, "runs", "export", "--format", "jsonl", "--out", file, "--id-prefix", "export-2")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "exported 1 run to "+file)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var run journal.Run
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(b), &run))
	require.Equal(t, "export-2", run.ID)
	var order workflows.Order
	require.NoError(t, json.Unmarshal(run.Input, &order))
	require.Equal(t, "•••• 4242", order.Card)

	r = executeWith(t, inv, "runs", "export", "--format", "jsonl", "--reveal")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, workflows.CardApproved, "--reveal: as the journal keeps it")
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 2)

	r = executeWith(t, inv, "runs", "export", "--format", "xml")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "invalid export format")
}
