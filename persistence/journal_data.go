package persistence

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/engine/journal"
)

// PutData keeps data under (runID, key) in Tables.RunData, replacing what
// was there (journal.DataStore); it goes with its run in PurgeEnded. It
// refuses, with an error matching journal.ErrInvalidEvent, an empty run id
// or key, or one that is not UTF-8 text without NUL bytes.
func (j *SQLJournal) PutData(ctx context.Context, runID, key string, data []byte) error {
	if err := journal.CheckDataKey(runID, key); err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	if _, err := j.db.Exec(ctx, j.dataSQL.put, runID, key, data); err != nil {
		return fmt.Errorf("journal %s: put data %q of run %q: %w", j.t.RunData, key, runID, err)
	}
	return nil
}

// Data returns what PutData kept under (runID, key), or an error matching
// journal.ErrDataNotFound.
func (j *SQLJournal) Data(ctx context.Context, runID, key string) ([]byte, error) {
	var data []byte
	err := j.db.QueryRow(ctx, j.dataSQL.get, runID, key).Scan(&data)
	switch {
	case err != nil && isNoRows(err):
		return nil, fmt.Errorf("journal %s: %w: %q of run %q", j.t.RunData, journal.ErrDataNotFound, key, runID)
	case err != nil:
		return nil, fmt.Errorf("journal %s: data %q of run %q: %w", j.t.RunData, key, runID, err)
	}
	return data, nil
}

// dataStatements are the DataStore statements, rendered for its tables
// once.
type dataStatements struct{ put, get string }

func renderDataStatements(t Tables) dataStatements {
	return dataStatements{
		put: t.render(`INSERT INTO {{run_data}} (run_id, key, data) VALUES ($1, $2, $3)
			ON CONFLICT (run_id, key) DO UPDATE SET data = EXCLUDED.data`),
		get: t.render(`SELECT data FROM {{run_data}} WHERE run_id = $1 AND key = $2`),
	}
}
