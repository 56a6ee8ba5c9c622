package persistence

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrInvalidTableName: a table name is not a plain lower-case identifier.
// Table names are the only caller data ever put into SQL text (no database
// binds a table name as a parameter), so they are checked, not trusted.
var ErrInvalidTableName = errors.New("invalid table name")

// Default table names.
const (
	DefaultMigrationsTable    = "acemq_migrations"
	DefaultOutboxTable        = "acemq_outbox"
	DefaultIdempotencyTable   = "acemq_idempotency"
	DefaultSchemasTable       = "acemq_schemas"
	DefaultSchemaCounterTable = "acemq_schema_ids"
	DefaultRunsTable          = "acemq_runs"
	DefaultRunEventsTable     = "acemq_run_events"
	DefaultRunDataTable       = "acemq_run_data"
	DefaultCronFiresTable     = "acemq_cron_fires"
	DefaultRunJoinsTable      = "acemq_run_joins"
	DefaultRunBranchesTable   = "acemq_run_branches"
	DefaultRunItemsTable      = "acemq_run_items"
	DefaultLimitsTable        = "acemq_limits"
	DefaultLimitSlotsTable    = "acemq_limit_slots"
	DefaultRatesTable         = "acemq_rates"
	DefaultRateTurnsTable     = "acemq_rate_turns"
	DefaultFlowVersionsTable  = "acemq_flow_versions"
	DefaultWorkersTable       = "acemq_workers"
)

// maxTableName leaves room under PostgreSQL's 63-byte identifier limit for
// the suffixes of the indexes named after a table (the longest,
// "_flow_due_idx", is 13 bytes).
const maxTableName = 50

var plainIdentifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Tables names the tables of the stores and of Migrate. An empty field is
// its default (DefaultOutboxTable, ...). Give every store and Migrate the
// same Tables: Migrate creates the tables the stores then use.
type Tables struct {
	// Migrations records which migrations were applied.
	Migrations string
	// Outbox holds SQLOutboxStore's records; it is also the LISTEN/NOTIFY
	// channel.
	Outbox string
	// Idempotency holds SQLIdempotencyStore's keys.
	Idempotency string
	// Schemas holds SQLSchemaRegistry's schemas.
	Schemas string
	// SchemaCounter holds the counter SQLSchemaRegistry takes ids from.
	SchemaCounter string
	// Runs holds SQLJournal's runs, one row each.
	Runs string
	// RunEvents holds SQLJournal's timelines, one row per entry.
	RunEvents string
	// RunData holds the data SQLJournal keeps for runs (journal.DataStore).
	RunData string
	// CronFires holds SQLCronGuard's claimed ticks.
	CronFires string
	// RunJoins holds the joins SQLJournal keeps for runs
	// (journal.JoinStore), one row each.
	RunJoins string
	// RunBranches holds the settled branches of runs' joins, one row
	// each, with the decision each settle made.
	RunBranches string
	// RunItems holds the items of runs' joins (a ForEach's list), one row
	// each.
	RunItems string
	// Limits holds, per key of a step with a ConcurrencyKey, how many
	// places are taken (journal.LimitStore); LimitSlots the holders of
	// those places and the runs waiting for one, with the messages that
	// bring them back.
	Limits, LimitSlots string
	// Rates holds the next free turn of each key of a rate-limited step;
	// RateTurns the turns reserved for runs that wait for them.
	Rates, RateTurns string
	// FlowVersions holds the versions of flows workers served, with
	// their steps and when they were first and last seen
	// (journal.VersionStore), one row each.
	FlowVersions string
	// Workers holds the workers' latest reports of themselves
	// (journal.WorkerStore), one row each.
	Workers string
}

// PrefixedTables names every table prefix followed by its default name's
// role ("svc_" gives svc_runs, svc_outbox, ...): several services, or
// tests, sharing one database without sharing tables. Validate still
// judges the names (a prefix that makes them too long, or not plain
// identifiers, is refused there).
func PrefixedTables(prefix string) Tables {
	var t Tables
	t = t.withDefaults()
	for _, f := range t.pointers() {
		*f = prefix + strings.TrimPrefix(*f, "acemq_")
	}
	return t
}

// pointers are t's fields, in the order of fields.
func (t *Tables) pointers() []*string {
	return []*string{&t.Migrations, &t.Outbox, &t.Idempotency, &t.Schemas, &t.SchemaCounter,
		&t.Runs, &t.RunEvents, &t.RunData, &t.CronFires, &t.RunJoins, &t.RunBranches, &t.RunItems,
		&t.Limits, &t.LimitSlots, &t.Rates, &t.RateTurns, &t.FlowVersions, &t.Workers}
}

// Names lists every table t names (defaults filled in), the migrations
// table first: what a test that made tables of its own drops.
func (t Tables) Names() []string {
	fs := t.withDefaults().fields()
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

// Validate refuses a name that is not a plain lower-case identifier
// (letters, digits and underscores, not starting with a digit, at most 50
// bytes), and two tables given the same name.
func (t Tables) Validate() error {
	t = t.withDefaults()
	seen := map[string]string{}
	for _, f := range t.fields() {
		if len(f.name) > maxTableName || !plainIdentifier.MatchString(f.name) {
			return fmt.Errorf("%w: %s table %q: want a lower-case identifier of at most %d bytes ([a-z_][a-z0-9_]*)",
				ErrInvalidTableName, f.role, f.name, maxTableName)
		}
		if other, dup := seen[f.name]; dup {
			return fmt.Errorf("%w: %s and %s tables are both %q", ErrInvalidTableName, other, f.role, f.name)
		}
		seen[f.name] = f.role
	}
	return nil
}

type tableField struct{ role, name string }

func (t Tables) fields() []tableField {
	return []tableField{
		{"migrations", t.Migrations}, {"outbox", t.Outbox}, {"idempotency", t.Idempotency},
		{"schemas", t.Schemas}, {"schema counter", t.SchemaCounter},
		{"runs", t.Runs}, {"run events", t.RunEvents}, {"run data", t.RunData}, {"cron fires", t.CronFires},
		{"run joins", t.RunJoins}, {"run branches", t.RunBranches}, {"run items", t.RunItems},
		{"limits", t.Limits}, {"limit slots", t.LimitSlots}, {"rates", t.Rates}, {"rate turns", t.RateTurns},
		{"flow versions", t.FlowVersions}, {"workers", t.Workers},
	}
}

func (t Tables) withDefaults() Tables {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&t.Migrations, DefaultMigrationsTable)
	def(&t.Outbox, DefaultOutboxTable)
	def(&t.Idempotency, DefaultIdempotencyTable)
	def(&t.Schemas, DefaultSchemasTable)
	def(&t.SchemaCounter, DefaultSchemaCounterTable)
	def(&t.Runs, DefaultRunsTable)
	def(&t.RunEvents, DefaultRunEventsTable)
	def(&t.RunData, DefaultRunDataTable)
	def(&t.CronFires, DefaultCronFiresTable)
	def(&t.RunJoins, DefaultRunJoinsTable)
	def(&t.RunBranches, DefaultRunBranchesTable)
	def(&t.RunItems, DefaultRunItemsTable)
	def(&t.Limits, DefaultLimitsTable)
	def(&t.LimitSlots, DefaultLimitSlotsTable)
	def(&t.Rates, DefaultRatesTable)
	def(&t.RateTurns, DefaultRateTurnsTable)
	def(&t.FlowVersions, DefaultFlowVersionsTable)
	def(&t.Workers, DefaultWorkersTable)
	return t
}

// checked validates t and returns it with defaults filled in.
func (t Tables) checked() (Tables, error) {
	if err := t.Validate(); err != nil {
		return Tables{}, err
	}
	return t.withDefaults(), nil
}

// render replaces the table placeholders of a statement with the quoted,
// validated names: the only way anything but a bound parameter gets into
// SQL here.
func (t Tables) render(sql string) string {
	q := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	return strings.NewReplacer(
		"{{migrations}}", q(t.Migrations),
		"{{outbox}}", q(t.Outbox),
		"{{outbox_leased_idx}}", q(t.Outbox+"_leased_idx"),
		"{{idempotency}}", q(t.Idempotency),
		"{{idempotency_expires_idx}}", q(t.Idempotency+"_expires_idx"),
		"{{schemas}}", q(t.Schemas),
		"{{schema_counter}}", q(t.SchemaCounter),
		"{{runs}}", q(t.Runs),
		"{{runs_flow_idx}}", q(t.Runs+"_flow_idx"),
		"{{runs_status_idx}}", q(t.Runs+"_status_idx"),
		"{{runs_error_idx}}", q(t.Runs+"_error_idx"),
		"{{runs_ended_idx}}", q(t.Runs+"_ended_idx"),
		"{{runs_due_idx}}", q(t.Runs+"_due_idx"),
		"{{runs_flow_due_idx}}", q(t.Runs+"_flow_due_idx"),
		"{{runs_input_idx}}", q(t.Runs+"_input_idx"),
		"{{runs_key_idx}}", q(t.Runs+"_key_idx"),
		"{{runs_failed_idx}}", q(t.Runs+"_failed_idx"),
		"{{run_events}}", q(t.RunEvents),
		"{{run_data}}", q(t.RunData),
		"{{cron_fires}}", q(t.CronFires),
		"{{run_joins}}", q(t.RunJoins),
		"{{run_branches}}", q(t.RunBranches),
		"{{run_items}}", q(t.RunItems),
		"{{limits}}", q(t.Limits),
		"{{limit_slots}}", q(t.LimitSlots),
		"{{limit_slots_waiting_idx}}", q(t.LimitSlots+"_waiting_idx"),
		"{{limit_slots_granted_idx}}", q(t.LimitSlots+"_granted_idx"),
		"{{limit_slots_run_idx}}", q(t.LimitSlots+"_run_idx"),
		"{{rates}}", q(t.Rates),
		"{{rate_turns}}", q(t.RateTurns),
		"{{flow_versions}}", q(t.FlowVersions),
		"{{workers}}", q(t.Workers),
	).Replace(sql)
}
