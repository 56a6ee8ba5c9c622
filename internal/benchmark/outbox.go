package benchmark

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// The outbox figure's relay: 256 publishes in flight, claims of 500.
const (
	OutboxInFlight = 256
	OutboxBatch    = 500
)

// ErrNoDatabase: a figure that needs PostgreSQL was asked for without
// Config.DB.
var ErrNoDatabase = errors.New("no database")

// Outbox measures the outbox relay, records/s from committed to confirmed
// (one sweep publishing N records committed beforehand to a quorum queue,
// OutboxInFlight in flight, claims of OutboxBatch), against sending the
// same messages with as many in flight without the database: the relay's
// ceiling on this broker. It needs cfg.DB.
func Outbox(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.DB == nil {
		return nil, fmt.Errorf("outbox: %w", ErrNoDatabase)
	}
	cfg.step("outbox: relay")
	relay, err := OutboxRelay(ctx, cfg, OutboxInFlight, OutboxBatch)
	if err != nil {
		return nil, err
	}
	cfg.step("outbox: the same messages sent without the database")
	send, err := SendInFlight(ctx, cfg, OutboxInFlight)
	if err != nil {
		return nil, err
	}
	return []Result{
		figure("outbox", "outbox relay", "records/s", HigherIsBetter, relay.Rate(), relay.Measurement).withCPU(relay.Measurement).
			compare("send, no database", send.Rate(), send, true).
			noted(fmt.Sprintf("committed to confirmed, %d in flight, claims of %d; baseline: the same messages sent with as many in flight; PostgreSQL's CPU is not counted",
				OutboxInFlight, OutboxBatch)),
	}, nil
}

// RelayMeasurement is an outbox relay's sweep, with the time it waited for
// the store: claims made in line, and marking records published.
type RelayMeasurement struct {
	Measurement
	Claim, Mark time.Duration
}

// OutboxRelay commits N records of 256 bytes to an outbox table of its
// own (one transaction, not measured), then measures one relay sweeping
// them all to a quorum queue (mandatory, confirmed, marked) with inFlight
// publishes in flight and claims of batch records. It needs cfg.DB.
func OutboxRelay(ctx context.Context, cfg Config, inFlight, batch int) (_ RelayMeasurement, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return RelayMeasurement{}, err
	}
	if cfg.DB == nil {
		return RelayMeasurement{}, fmt.Errorf("outbox relay: %w", ErrNoDatabase)
	}
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return RelayMeasurement{}, err
	}
	defer s.close(ctx, &err)
	tables, err := s.migratedTables(ctx)
	if err != nil {
		return RelayMeasurement{}, err
	}
	conn, err := s.open(ctx)
	if err != nil {
		return RelayMeasurement{}, err
	}
	q, err := s.consumerQueue(ctx, "outbox")
	if err != nil {
		return RelayMeasurement{}, err
	}
	store, err := persistence.NewSQLOutboxStore(cfg.DB, persistence.SQLOutboxStoreConfig{Tables: tables})
	if err != nil {
		return RelayMeasurement{}, fmt.Errorf("outbox store: %w", err)
	}
	body := make([]byte, CoreBodySize)
	err = pgx.BeginFunc(ctx, cfg.DB, func(tx pgx.Tx) error {
		for i := range cfg.N {
			rec, err := patterns.Record(ctx, conn, body, broker.To(q), broker.MessageID("b-"+strconv.Itoa(i)))
			if err != nil {
				return err
			}
			if _, err := store.Add(ctx, tx, rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return RelayMeasurement{}, fmt.Errorf("add the records: %w", err)
	}
	ts := &timedOutboxStore{SQLOutboxStore: store}
	rl, err := patterns.NewOutboxRelay(conn, ts, patterns.OutboxRelayConfig{BatchSize: batch, InFlight: inFlight, Logger: cfg.Logger})
	if err != nil {
		return RelayMeasurement{}, fmt.Errorf("outbox relay: %w", err)
	}
	s.closing("close the relay", rl.Close)
	c := startClock()
	sent, err := rl.Sweep(ctx)
	m := RelayMeasurement{Measurement: c.stop(sent, sent), Claim: ts.claim, Mark: ts.mark}
	if err != nil {
		return m, fmt.Errorf("relay sweep: %w", err)
	}
	if sent != cfg.N {
		return m, fmt.Errorf("relay sweep: sent %d of %d records", sent, cfg.N)
	}
	return m, nil
}

// timedOutboxStore adds up the time a relay spends waiting for the store:
// claims made in line (Pending) and marking. Claims made ahead
// (PendingAfter, promoted from the store) overlap publishing and are not
// counted. A relay makes these calls one at a time, so plain sums do.
type timedOutboxStore struct {
	*persistence.SQLOutboxStore
	claim, mark time.Duration
}

// Pending claims in line, timed.
func (t *timedOutboxStore) Pending(ctx context.Context, limit int) ([]patterns.OutboxRecord, error) {
	start := time.Now()
	defer func() { t.claim += time.Since(start) }()
	return t.SQLOutboxStore.Pending(ctx, limit)
}

// MarkPublished marks, timed.
func (t *timedOutboxStore) MarkPublished(ctx context.Context, ids ...string) error {
	start := time.Now()
	defer func() { t.mark += time.Since(start) }()
	return t.SQLOutboxStore.MarkPublished(ctx, ids...)
}

// SendInFlight sends N prepared 256-byte mandatory messages to a quorum
// queue through broker.Conn.Send, as an outbox relay sends them, from
// inFlight goroutines each waiting for its confirm: the ceiling any relay
// reaches on this broker.
func SendInFlight(ctx context.Context, cfg Config, inFlight int) (_ Measurement, err error) {
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	conn, err := s.open(ctx)
	if err != nil {
		return Measurement{}, err
	}
	q, err := s.consumerQueue(ctx, "send")
	if err != nil {
		return Measurement{}, err
	}
	outs := make([]broker.Outgoing, cfg.N)
	body := make([]byte, CoreBodySize)
	for i := range outs {
		if outs[i], err = conn.Prepare(ctx, body, broker.To(q), broker.Mandatory()); err != nil {
			return Measurement{}, fmt.Errorf("prepare: %w", err)
		}
	}
	return measureCalls(ctx, cfg.N, cfg.N, inFlight, nil, func(ctx context.Context, i int) error {
		if err := conn.Send(ctx, outs[i]); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	})
}
