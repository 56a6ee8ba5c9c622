package persistence

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
)

// ErrInvalidEvent is journal.ErrInvalidEvent: Record was given an event no
// journal can keep (journal.Event.Validate). The whole batch is refused;
// recording it again cannot succeed (journal.Writer sets such events aside).
var ErrInvalidEvent = journal.ErrInvalidEvent

// SQLJournalConfig configures a SQLJournal. The zero value is the
// defaults.
type SQLJournalConfig struct {
	// Tables names the tables (only Runs, RunEvents, RunData, RunJoins,
	// RunBranches and RunItems are used here).
	Tables Tables
	// Retention is how long a stopped run is kept after it ended, for
	// whoever runs PurgeEnded on a schedule (the worker, when it is set);
	// 0 keeps runs until someone purges them.
	Retention time.Duration
	// PurgeBatch is how many runs one statement of PurgeEnded deletes,
	// with their events (0 = DefaultPurgeBatch).
	PurgeBatch int
}

// SQLJournal is the run journal (journal.Journal) on PostgreSQL, shared
// by every worker of a database: one row per run in Tables.Runs, one per
// timeline entry in Tables.RunEvents, applied by the journal package's
// rules so that batches from several workers, in any order and at the
// same time, give the runs journal.Memory would.
//
// Record writes a batch in one statement (one round trip, one
// transaction). Nothing deletes runs but PurgeEnded, which the caller runs
// when it wants retention. Times are kept to the microsecond, PostgreSQL's
// precision. Safe for concurrent use.
type SQLJournal struct {
	db       DB
	t        Tables
	sql      journalStatements
	dataSQL  dataStatements
	joinSQL  joinStatements
	limitSQL limitStatements
	// versionSQL are the VersionStore statements.
	versionSQL versionStatements
	// workerSQL are the WorkerStore statements.
	workerSQL workerStatements
	// releases batches the limits' releases (group commit).
	releases group[*limitReq]
	// lookups groups the Runs asked for at once.
	lookups    group[*runReq]
	retention  time.Duration
	purgeBatch int
	settles    settler
}

var (
	_ journal.Journal    = (*SQLJournal)(nil)
	_ journal.DataStore  = (*SQLJournal)(nil)
	_ journal.JoinStore  = (*SQLJournal)(nil)
	_ journal.LimitStore = (*SQLJournal)(nil)
	_ journal.StepInputs = (*SQLJournal)(nil)
)

// NewSQLJournal returns a journal running on db (a pool, usually) over
// tables MigrateTables created. It refuses a nil db, invalid table names
// and negative settings.
func NewSQLJournal(db DB, cfg SQLJournalConfig) (*SQLJournal, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: journal: nil db", broker.ErrInvalidOption)
	}
	t, err := cfg.Tables.checked()
	if err != nil {
		return nil, err
	}
	if cfg.Retention < 0 || cfg.PurgeBatch < 0 {
		return nil, fmt.Errorf("%w: journal: negative retention %s or purge batch %d", broker.ErrInvalidOption, cfg.Retention, cfg.PurgeBatch)
	}
	j := &SQLJournal{db: db, t: t, sql: renderJournalStatements(t), dataSQL: renderDataStatements(t), joinSQL: renderJoinStatements(t), limitSQL: renderLimitStatements(t), versionSQL: renderVersionStatements(t), workerSQL: renderWorkerStatements(t), retention: cfg.Retention, purgeBatch: cfg.PurgeBatch}
	if j.purgeBatch == 0 {
		j.purgeBatch = DefaultPurgeBatch
	}
	return j, nil
}

// Retention is the configured SQLJournalConfig.Retention: how long ended
// runs are to be kept, 0 when nobody should purge them.
func (j *SQLJournal) Retention() time.Duration { return j.retention }

// Record applies events by the journal package's rules, all or nothing, in
// one statement (one round trip). It refuses, with ErrInvalidEvent and
// before writing anything, an event without a run id, with an unknown
// status, an attempt or replay count beyond 32 bits, or an id or name that
// is not valid UTF-8 or holds a NUL byte; error texts are made storable
// instead (invalid bytes and NULs become U+FFFD) and bounded with
// journal.Truncate.
//
// Two Records touching the same runs at once are safe: each run row is
// upserted under its row lock and changed only by a status event whose Seq
// is not below the row's, and every batch locks its runs in run id order,
// then its timeline entries in (run id, key) order, so concurrent batches
// wait for each other rather than deadlock.
//
// Called by SQLIdempotencyStore.RecordKept, through whatever wraps the
// journal, it writes the keys the store keeps with the events in the same
// statement, when the store is on its database (keptWrite).
func (j *SQLJournal) Record(ctx context.Context, events []journal.Event) error {
	w := keptWriteOf(ctx)
	if w != nil {
		w.reached = w.store.db == j.db
	}
	if len(events) == 0 {
		return nil
	}
	b, err := newJournalBatch(events)
	if err != nil {
		return fmt.Errorf("journal %s: record: %w", j.t.Runs, err)
	}
	if w != nil && w.reached {
		return w.store.recordKeptIn(ctx, j, b, len(events), w)
	}
	if _, err := j.db.Exec(ctx, j.sql.record, b.args()...); err != nil {
		return fmt.Errorf("journal %s: record %d events: %w", j.t.Runs, len(events), err)
	}
	return nil
}

// PurgeEnded deletes the runs that ended more than olderThan ago (by the
// database's clock), with their timelines, data and joins (with the joins'
// branches and items), PurgeBatch runs per statement so that no statement
// holds many locks for long, and says how many runs went. Runs that have
// not stopped are never deleted; runs a Record is
// writing at that moment are skipped, not waited for. An event recorded
// for a run after it was purged starts it again, as a run first heard of
// from that event. It refuses a negative olderThan.
func (j *SQLJournal) PurgeEnded(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("%w: journal %s: purge runs ended %s ago", broker.ErrInvalidOption, j.t.Runs, olderThan)
	}
	var total int64
	for {
		var n int64
		if err := j.db.QueryRow(ctx, j.sql.purge, olderThan.Seconds(), j.purgeBatch).Scan(&n); err != nil {
			return total, fmt.Errorf("journal %s: purge ended runs: %w", j.t.Runs, err)
		}
		total += n
		if n < int64(j.purgeBatch) {
			return total, nil
		}
	}
}

// journalBatch is a batch of events folded for the record statement: the
// timeline entries, one per (run, key), and one row per run, both sorted
// so that every batch locks rows in the same order.
type journalBatch struct {
	runs   []runFold
	events []journal.Event
}

// runFold is what a batch does to one run. run is the run the batch
// creates when the run is new (journal.NewRun of its first event, then
// every event applied): the row inserted. For a run that exists the
// statement merges instead: the earliest start (minStart), the input if
// it has none or the batch's is of a later replay (the run started again),
// and run's status fields if hasStatus and run.Seq is not below the row's.
type runFold struct {
	run       journal.Run
	minStart  *time.Time
	hasStatus bool
}

func newJournalBatch(events []journal.Event) (journalBatch, error) {
	folds := map[string]*runFold{}
	entries := map[[2]string]int{}
	var b journalBatch
	for i, e := range events {
		if err := e.Validate(); err != nil {
			return journalBatch{}, fmt.Errorf("event %d: %w", i, err)
		}
		e.Error = journal.Truncate(e.Error)
		f, ok := folds[e.RunID]
		if !ok {
			f = &runFold{run: journal.NewRun(e)}
			folds[e.RunID] = f
		}
		journal.Apply(&f.run, e)
		if e.Kind == journal.KindStart && (f.minStart == nil || e.StartedAt.Before(*f.minStart)) {
			at := e.StartedAt
			f.minStart = &at
		}
		// A status event below Seq -1 changes no run: every run is at -1
		// or later.
		if e.Status != "" && e.Seq >= -1 {
			f.hasStatus = true
		}
		// The later of two events with one key is the entry, as in
		// journal.Memory.
		k := [2]string{e.RunID, e.Key}
		if at, dup := entries[k]; dup {
			b.events[at] = e
			continue
		}
		entries[k] = len(b.events)
		b.events = append(b.events, e)
	}
	b.runs = make([]runFold, 0, len(folds))
	for _, f := range folds {
		b.runs = append(b.runs, *f)
	}
	// Byte order, as the columns' "C" collation sorts.
	slices.SortFunc(b.runs, func(x, y runFold) int { return strings.Compare(x.run.ID, y.run.ID) })
	slices.SortFunc(b.events, func(x, y journal.Event) int {
		return cmp.Or(strings.Compare(x.RunID, y.RunID), strings.Compare(x.Key, y.Key))
	})
	return b, nil
}

// args are the record statement's parameters: one array per column, of
// the runs ($1-$15, $32, $33, $37 and $38) and of the timeline entries ($16-$31 and
// $34-$36, their steps' inputs).
func (b journalBatch) args() []any {
	n := len(b.runs)
	var (
		ids, flows, statuses, steps, errs, deadLetters = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		inputs                                         = make([][]byte, n)
		started, updated                               = make([]time.Time, n), make([]time.Time, n)
		ended, due, minStarts                          = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		replays, inputReplays                          = make([]int, n), make([]int, n)
		versions                                       = make([]string, n)
		seqs                                           = make([]int64, n)
		hasStatus                                      = make([]bool, n)
		// The runs' business keys, and whether their inputs go to
		// input_json too ($37, $38).
		businessKeys, inputJSON = make([]string, n), make([]bool, n)
	)
	for i, f := range b.runs {
		r := f.run
		ids[i], flows[i], statuses[i], steps[i], errs[i], deadLetters[i] = r.ID, r.Flow, string(r.Status), r.Step, r.Error, r.DeadLetter
		if len(r.Input) > 0 {
			inputs[i] = r.Input
		}
		started[i], updated[i], ended[i], due[i], minStarts[i] = r.StartedAt, r.UpdatedAt, r.EndedAt, r.DueAt, f.minStart
		replays[i], seqs[i], hasStatus[i], inputReplays[i], versions[i] = r.Replays, r.Seq, f.hasStatus, r.InputReplays, r.Version
		businessKeys[i], inputJSON[i] = r.BusinessKey, jsonbSafe(r.Input)
	}
	m := len(b.events)
	var (
		eRuns, eKeys, eKinds, eSteps, eOutcomes, eErrs = make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m)
		eQueues, eStatuses, eRunSteps, eDeadLetters    = make([]string, m), make([]string, m), make([]string, m), make([]string, m)
		eSeqs                                          = make([]int64, m)
		eAttempts, eReplays                            = make([]int, m), make([]int, m)
		eStarted, eEnded                               = make([]time.Time, m), make([]time.Time, m)
		eDue                                           = make([]*time.Time, m)
		eInputs                                        = make([][]byte, m)
		eStates                                        = make([]string, m)
		eSizes                                         = make([]int, m)
	)
	for i, e := range b.events {
		eRuns[i], eKeys[i], eKinds[i], eSteps[i], eOutcomes[i], eErrs[i] = e.RunID, e.Key, string(e.Kind), e.Step, e.Outcome, e.Error
		eQueues[i], eStatuses[i], eRunSteps[i], eDeadLetters[i] = e.Queue, string(e.Status), e.RunStep, e.DeadLetter
		eSeqs[i], eAttempts[i], eReplays[i] = e.Seq, e.Attempt, e.Replays
		eStarted[i], eEnded[i], eDue[i] = e.StartedAt, e.EndedAt, e.DueAt
		eInputs[i], eStates[i], eSizes[i] = e.StepInput, e.StepState, e.InputSize
	}
	return []any{
		ids, flows, statuses, steps, inputs, errs, started, updated, ended, due, deadLetters, replays, seqs, minStarts, hasStatus,
		eRuns, eKeys, eSeqs, eKinds, eSteps, eAttempts, eOutcomes, eStarted, eEnded, eErrs, eQueues, eDue, eStatuses, eRunSteps, eReplays, eDeadLetters,
		inputReplays, versions,
		eInputs, eStates, eSizes,
		businessKeys, inputJSON,
	}
}
