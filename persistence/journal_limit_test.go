package persistence_test

import (
	"testing"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/journal/journaltest"
	"github.com/acemq/acemq-flow/persistence"
)

func TestSQLJournalLimitConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	journaltest.Limits(t, func(t *testing.T) journal.LimitStore {
		return sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	})
}

// TestSQLJournalLimitsOfTwoWorkers: two journals on one database, as two
// workers have, take places and turns of the same keys at once: no key
// ever has more holders than its limit, every waiter gets in, and every
// turn is one interval after another.
func TestSQLJournalLimitsOfTwoWorkers(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	a, b := sqlJournal(t, db, tb, persistence.SQLJournalConfig{}), sqlJournal(t, db, tb, persistence.SQLJournalConfig{})
	t.Run("places", func(t *testing.T) { journaltest.ManyHolders(t, a, b) })
	t.Run("turns", func(t *testing.T) { journaltest.ManyTurns(t, a, b) })
}
