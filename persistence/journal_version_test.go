package persistence_test

import (
	"testing"

	"github.com/acemq/acemq-flow/engine/journal/journaltest"
	"github.com/acemq/acemq-flow/persistence"
)

func TestSQLJournalVersionConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	journaltest.Versions(t, func(t *testing.T) journaltest.VersionJournal {
		return sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	})
}
