package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/engine/observe"
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

// brokerTLS is TLS to the broker for an amqps:// --url, from the global
// flags --broker-ca-file, --broker-cert-file, --broker-key-file and
// --broker-server-name (ACEMQ_BROKER_CA_FILE, ...). The URL's query
// parameters (cacertfile, certfile, keyfile, server_name_indication) win
// over them. PostgreSQL takes its TLS settings in --database-url
// (sslmode, sslrootcert, sslcert, sslkey).
type brokerTLS struct {
	caFile, certFile, keyFile, serverName string
}

// add registers the flags on fs.
func (b *brokerTLS) add(fs *pflag.FlagSet) {
	fs.StringVar(&b.caFile, "broker-ca-file", "", "PEM file of the CAs that sign the broker's certificates, for an amqps:// --url (default: the system's CAs)")
	fs.StringVar(&b.certFile, "broker-cert-file", "", "PEM client certificate for an amqps:// --url whose broker asks for one (with --broker-key-file)")
	fs.StringVar(&b.keyFile, "broker-key-file", "", "PEM key of --broker-cert-file")
	fs.StringVar(&b.serverName, "broker-server-name", "", "name the broker's certificates must be issued to, for an amqps:// --url (default: each node's host)")
}

// apply puts the settings into cfg for a connection to url. It refuses
// them for an amqp:// url, which would connect without TLS, naming the
// flag; the embedded broker (memory://) ignores them.
func (b brokerTLS) apply(url string, cfg *rabbitmq.Config) error {
	scheme, _, _ := strings.Cut(url, "://")
	if scheme != "amqps" {
		var given []string
		for _, f := range []struct{ flag, value string }{
			{"--broker-ca-file", b.caFile}, {"--broker-cert-file", b.certFile},
			{"--broker-key-file", b.keyFile}, {"--broker-server-name", b.serverName},
		} {
			if f.value != "" {
				given = append(given, fmt.Sprintf("%s (%s)", f.flag, envName(strings.TrimPrefix(f.flag, "--"))))
			}
		}
		if len(given) > 0 && scheme == "amqp" {
			return fmt.Errorf("%w: %s asks for TLS, but the broker URL is amqp://, which connects without it: use amqps://",
				rabbitmq.ErrInvalidTLS, strings.Join(given, ", "))
		}
		return nil
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile, cfg.ServerName = b.caFile, b.certFile, b.keyFile, b.serverName
	return nil
}

// sessionConfig says what a command needs of its engine.
type sessionConfig struct {
	broker brokerFlags
	// closeTimeout bounds the drain of workers and the close of the
	// connection (0 = the broker's default).
	closeTimeout time.Duration
	// noDatabase is said on stderr when there is no database ("" = say
	// nothing).
	noDatabase string
	// journalRetention is how long a worker keeps ended runs in the
	// database's journal (0 = for ever).
	journalRetention time.Duration
	// cronAlone makes this worker fire the cron triggers without a
	// database, alone (worker --cron).
	cronAlone bool
	// claimTimeout is the lease of the shared idempotency store's claims
	// (worker --claim-timeout; 0 = the store's default).
	claimTimeout time.Duration
	// heartbeat is how often a worker reports itself to the journal
	// (worker --heartbeat; 0 = engine.DefaultHeartbeat); a worker's
	// reports say what its /readyz checks find (readinessChecks).
	heartbeat time.Duration
	worker    bool
}

// database is how the session opens the stores: the schema only warned
// about (another tool may own it; warnUnmigrated), the worker's settings
// in. The store and the cron guard go to every command's engine, and only
// a worker uses them.
func (sc sessionConfig) database() enginepg.Config {
	return enginepg.Config{Migrations: enginepg.SkipMigrations, JournalRetention: sc.journalRetention, ClaimTimeout: sc.claimTimeout}
}

// session is an engine with the connection and database it runs on, for
// one command; close it when done.
type session struct {
	// db is nil without a database: the engine's stores are in memory.
	db   *enginepg.Stores
	conn *broker.Conn
	eng  *engine.Engine
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
	if s.db, err = a.openStores(cmd, sc.database()); err != nil {
		return nil, err
	}
	if s.db == nil && sc.noDatabase != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), sc.noDatabase)
	}
	if s.conn, err = a.openWith(cmd, sc.broker.url, broker.Config{Ladder: sc.broker.ladder, CloseTimeout: sc.closeTimeout}); err != nil {
		return nil, err
	}
	cfg := engine.Config{Conn: s.conn, CloseTimeout: sc.closeTimeout, CronAlone: sc.cronAlone, Build: Version, Heartbeat: sc.heartbeat}
	if sc.worker {
		cfg.Readiness = observe.ReportReadiness(s.readinessChecks()...)
	}
	if s.db != nil {
		a.warnUnmigrated(cmd.Context(), s.db, s.conn.Logger())
		// Every worker on the database shares its journal, its claims
		// and its cron ticks (the guard lets one worker start each
		// tick's run).
		cfg = s.db.Engine(cfg)
	}
	if s.eng, err = engine.New(cfg); err != nil {
		return nil, err
	}
	if err := s.eng.Register(a.flows...); err != nil {
		return nil, fmt.Errorf("register flows: %w", err)
	}
	return s, nil
}

// readinessChecks are what a worker of the session is ready by, besides
// its own consumers: the broker answers, and the database when there is
// one. /readyz runs them (with the worker's gate), and so do the worker's
// reports to the journal.
func (s *session) readinessChecks() []observe.Check {
	checks := []observe.Check{observe.BrokerCheck(s.conn)}
	if s.db != nil {
		checks = append(checks, observe.Check{Name: "database", Run: func(ctx context.Context) error {
			if err := s.db.Ping(ctx); err != nil {
				return databaseError(err)
			}
			return nil
		}})
	}
	return checks
}

// shared says the journal is on the database, so runs other processes
// recorded can be seen.
func (s *session) shared() bool { return s.db != nil }

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
	s.db.Close()
}
