package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
)

// brokerFlags are the flags of every command that talks to the broker.
type brokerFlags struct {
	url, ladder string
}

// add registers --url and --ladder on cmd.
func (f *brokerFlags) add(cmd *cobra.Command) {
	addURLFlag(cmd, &f.url)
	addLadderFlag(cmd.Flags(), &f.ladder)
}

// sessionConfig says what a command needs of its engine.
type sessionConfig struct {
	broker brokerFlags
	// closeTimeout bounds the drain of workers and the close of the
	// connection (0 = the broker's default).
	closeTimeout time.Duration
	// store asks for the shared idempotency store (workers only: nothing
	// else runs steps).
	store bool
	// noDatabase is said on stderr when there is no database ("" = say
	// nothing).
	noDatabase string
	// journalRetention is how long a worker keeps ended runs in the
	// database's journal (0 = for ever).
	journalRetention time.Duration
	// cronAlone makes this worker fire the cron triggers without a
	// database, alone (worker --cron).
	cronAlone bool
}

// session is an engine with the connection and database it runs on, for
// one command; close it when done.
type session struct {
	db   *database
	conn *broker.Conn
	eng  *engine.Engine
	// shared says the journal is on the database, so runs other processes
	// recorded can be seen.
	shared bool
}

// openSession opens the database (first: a bad database URL fails before
// anything is published), then the broker, and builds the engine with
// the app's flows registered.
func (a *app) openSession(cmd *cobra.Command, sc sessionConfig) (_ *session, err error) {
	s := &session{}
	defer func() {
		if err != nil {
			s.close(cmd.Context(), &err)
		}
	}()
	if s.db, err = a.openDatabase(cmd); err != nil {
		return nil, err
	}
	if s.db == nil && sc.noDatabase != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), sc.noDatabase)
	}
	if s.conn, err = a.openWith(cmd, sc.broker.url, broker.Config{Ladder: sc.broker.ladder, CloseTimeout: sc.closeTimeout}); err != nil {
		return nil, err
	}
	cfg := engine.Config{Conn: s.conn, CloseTimeout: sc.closeTimeout}
	if s.db != nil {
		s.db.warnUnmigrated(cmd.Context(), s.conn.Logger())
		if cfg.Journal, err = s.db.journal(sc.journalRetention); err != nil {
			return nil, err
		}
		s.shared = true
		if sc.store {
			if cfg.Store, err = s.db.store(); err != nil {
				return nil, err
			}
			// Every worker on the database fires cron triggers; the guard
			// lets one of them start each tick's run.
			if cfg.CronGuard, err = s.db.cronGuard(); err != nil {
				return nil, err
			}
		}
	}
	cfg.CronAlone = sc.cronAlone
	if s.eng, err = engine.New(cfg); err != nil {
		return nil, err
	}
	if err := s.eng.Register(a.flows...); err != nil {
		return nil, fmt.Errorf("register flows: %w", err)
	}
	return s, nil
}

// close flushes and closes the engine's journal writer, then closes the
// connection and the database, even after the command's context was
// cancelled, adding failures to *err.
func (s *session) close(ctx context.Context, err *error) {
	ctx = context.WithoutCancel(ctx)
	if s.eng != nil {
		if cerr := s.eng.Close(ctx); cerr != nil {
			*err = errors.Join(*err, fmt.Errorf("close the engine (journal not flushed): %w", cerr))
		}
	}
	if s.conn != nil {
		closeConn(ctx, s.conn, err)
	}
	s.db.close()
}
