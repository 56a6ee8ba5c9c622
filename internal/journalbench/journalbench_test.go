package journalbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/journalbench"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestLoadWritesRunOf: every run Load writes is the RunOf of its number,
// field by field, the statuses in about the shares the package says; the
// tables ForTest made are gone once its test ended.
func TestLoadWritesRunOf(t *testing.T) {
	t.Parallel()
	const n = 5000
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var set *journalbench.Set
	t.Run("load", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		set = journalbench.ForTest(ctx, t, "acemq_jb", n, end)
		rows, err := set.Pool.Query(ctx, `SELECT run_id, flow, status, step, error, started_at, ended_at, business_key,
			input_json->>'customer' FROM `+pgx.Identifier{set.Tables.Runs}.Sanitize()+` ORDER BY run_id`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (journalbench.Run, error) {
			var r journalbench.Run
			var status string
			err := row.Scan(&r.ID, &r.Flow, &status, &r.Step, &r.Error, &r.StartedAt, &r.EndedAt, &r.BusinessKey, &r.Customer)
			r.Status, r.StartedAt = journal.Status(status), r.StartedAt.UTC()
			if r.EndedAt != nil {
				at := r.EndedAt.UTC()
				r.EndedAt = &at
			}
			return r, err
		})
		require.NoError(t, err)
		require.Len(t, got, n)
		shares := map[journal.Status]int64{}
		for i, r := range got {
			require.Equal(t, set.Run(i+1), r, "run %d", i+1)
			shares[r.Status]++
		}
		require.InDelta(t, 0.80*n, shares[journal.Completed], 0.02*n)
		require.InDelta(t, 0.05*n, shares[journal.Failed], 0.01*n)
		require.Equal(t, shares[journal.Failed], set.Count(func(r journalbench.Run) bool { return r.Status == journal.Failed }))
		require.Equal(t, "Ada", set.Run(journalbench.AdaEvery).Customer)
	})
	conn, err := pgx.Connect(t.Context(), testenv.DatabaseURL(t))
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var left int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE tablename = ANY($1)`, set.Tables.Names()).Scan(&left))
	require.Zero(t, left, "the tables are dropped")
}
