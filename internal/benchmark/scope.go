package benchmark

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/persistence"
)

// cleanupTimeout bounds what a scope does when it ends: closing what it
// opened and deleting what it declared.
const cleanupTimeout = 30 * time.Second

// scope owns what one measurement opens and declares, and undoes all of
// it when the measurement ends, also after a failure or a cancelled
// context: it closes what it opened (newest first), then deletes the
// queues, exchanges and tables.
type scope struct {
	cfg       Config
	admin     *broker.Conn
	closers   []func(context.Context) error
	queues    []string
	exchanges []string
	tables    []string
}

// newScope begins a measurement: it fills in cfg's defaults, returning
// the completed Config, and opens the connection the scope deletes with.
// The caller defers s.close.
func newScope(ctx context.Context, cfg Config) (Config, *scope, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return cfg, nil, err
	}
	admin, err := broker.Config{Logger: cfg.Logger}.Open(ctx, cfg.URL)
	if err != nil {
		return cfg, nil, fmt.Errorf("connect to the broker: %w", err)
	}
	return cfg, &scope{cfg: cfg, admin: admin}, nil
}

// close undoes everything, with a context of its own (ctx may be the
// cancelled one of an interrupted run), and adds what failed to *err.
func (s *scope) close(ctx context.Context, err *error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i](ctx))
	}
	for _, q := range s.queues {
		if _, derr := s.admin.Transport().DeleteQueue(ctx, q); derr != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, derr))
		}
	}
	for _, x := range s.exchanges {
		if derr := s.admin.Transport().DeleteExchange(ctx, x); derr != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", x, derr))
		}
	}
	for _, t := range s.tables {
		if _, derr := s.cfg.DB.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); derr != nil {
			errs = append(errs, fmt.Errorf("drop table %s: %w", t, derr))
		}
	}
	if cerr := s.admin.Close(ctx); cerr != nil {
		errs = append(errs, fmt.Errorf("close the connection: %w", cerr))
	}
	if cleanup := errors.Join(errs...); cleanup != nil {
		*err = errors.Join(*err, fmt.Errorf("clean up: %w", cleanup))
	}
}

// onClose runs f when the scope ends, before the deletions and before
// whatever was registered earlier.
func (s *scope) onClose(f func(context.Context) error) { s.closers = append(s.closers, f) }

// closing calls stop (a Close or Cancel method) when the scope ends, as
// onClose does; what says what failed in its error ("close the engine").
func (s *scope) closing(what string, stop func(context.Context) error) {
	s.onClose(func(ctx context.Context) error {
		if err := stop(ctx); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// deleteQueues deletes the named queues when the scope ends.
func (s *scope) deleteQueues(names ...string) { s.queues = append(s.queues, names...) }

// deleteExchanges deletes the named exchanges when the scope ends.
func (s *scope) deleteExchanges(names ...string) { s.exchanges = append(s.exchanges, names...) }

// queue is a new queue name of the run's own, deleted with its .dlq and
// .parked when the scope ends; nothing is declared.
func (s *scope) queue(what string) string {
	q := s.cfg.name(what)
	s.deleteQueues(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
	return q
}

// consumerQueue is a new queue declared as a consumer declares it (a
// quorum queue with its .dlq and .parked).
func (s *scope) consumerQueue(ctx context.Context, what string) (string, error) {
	q := s.queue(what)
	if err := s.admin.Declare(ctx, broker.ConsumerTopology(q)); err != nil {
		return "", fmt.Errorf("declare %s: %w", q, err)
	}
	return q, nil
}

// ladder is a scheduler ladder name of the run's own, its queues and
// exchange deleted when the scope ends.
func (s *scope) ladder() string {
	name := s.cfg.name("ladder")
	for _, q := range broker.LadderTopology(name).Queues {
		s.deleteQueues(q.Name)
	}
	s.deleteExchanges(name)
	return name
}

// open connects to the broker with a ladder of the run's own; the
// connection closes when the scope ends.
func (s *scope) open(ctx context.Context) (*broker.Conn, error) {
	conn, err := broker.Config{Logger: s.cfg.Logger, Ladder: s.ladder()}.Open(ctx, s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("connect to the broker: %w", err)
	}
	s.closing("close connection", conn.Close)
	return conn, nil
}

// dial opens a plain amqp091-go connection, closed when the scope ends.
func (s *scope) dial() (*amqp.Connection, error) {
	ac, err := amqp.Dial(s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("amqp091-go: connect: %w", err)
	}
	s.onClose(func(context.Context) error {
		if err := ac.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
			return fmt.Errorf("amqp091-go: close: %w", err)
		}
		return nil
	})
	return ac, nil
}

// migratedTables are tables of the run's own on cfg.DB, migrated, dropped
// when the scope ends.
func (s *scope) migratedTables(ctx context.Context) (persistence.Tables, error) {
	if s.cfg.DB == nil {
		return persistence.Tables{}, errors.New("no database")
	}
	p := TablePrefix(s.cfg.ID) + randomHex(5) + "_"
	t := persistence.PrefixedTables(p)
	s.tables = append(s.tables, t.Names()...)
	if err := persistence.MigrateTables(ctx, s.cfg.DB, t); err != nil {
		return t, fmt.Errorf("create the tables: %w", err)
	}
	return t, nil
}
