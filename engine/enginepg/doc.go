// Package enginepg wires the engine to PostgreSQL: from a database URL
// ([Open]) or a pgx pool of the caller's ([FromPool]), one call gives the
// stores every worker of a database shares (the run journal, the
// idempotency store and the cron guard of package persistence), with the
// embedded migrations applied or checked, ready for engine.Config:
//
//	stores, err := enginepg.Open(ctx, os.Getenv("DATABASE_URL"), enginepg.Config{
//		Migrations:       enginepg.ApplyMigrations,
//		JournalRetention: 30 * 24 * time.Hour,
//	})
//	if err != nil {
//		return err
//	}
//	defer stores.Close()
//	eng, err := engine.New(stores.Engine(engine.Config{Conn: conn}))
//
// The acemq-flow command line opens its database with this package, so a
// worker of one's own runs on exactly the stores `acemq-flow worker` does.
//
// # Migrations
//
// [Config.Migrations] says what opening does about the schema. The zero
// value, [CheckMigrations], refuses a database that has not applied every
// migration this build embeds ([ErrNotMigrated], naming them): a worker on
// missing tables would otherwise start and fail at its first step.
// [ApplyMigrations] applies them (persistence.MigrateTables: one
// transaction under an advisory lock, safe from several processes at once)
// and [Stores.Applied] says which it applied. [SkipMigrations] looks at
// nothing, for a schema another tool owns; [Stores.Missing] still tells.
//
// # What is whose
//
// A pool Open created is closed by [Stores.Close]; a pool given to
// FromPool is the caller's, and Close leaves it open. Errors never show
// the URL's password or sslpassword.
//
// # Why a package of its own
//
// Package persistence implements the stores and does not import the
// engine: the journal's interface lives in the leaf package engine/journal
// so that neither imports the other, and a user of the outbox alone does
// not link the engine. Filling an engine.Config needs both, so it lives
// here, beside the engine, importing the two.
//
// Config is a struct whose zero value is the defaults, checked by
// [Config.Validate].
package enginepg
