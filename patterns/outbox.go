package patterns

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// Outbox errors, for errors.Is.
var (
	// ErrInvalidOutboxRecord: a store refused a record it could never relay.
	ErrInvalidOutboxRecord = errors.New("invalid outbox record")
	// ErrOutboxCannotListen: an OutboxNotifier cannot listen in its
	// current configuration; the relay polls instead.
	ErrOutboxCannotListen = errors.New("outbox store cannot listen for new records")
	// ErrOutboxRelayStarted: Start was called on a relay already started.
	ErrOutboxRelayStarted = errors.New("outbox relay already started")
	// ErrOutboxRelayClosed: the relay was closed.
	ErrOutboxRelayClosed = errors.New("outbox relay closed")
)

// OutboxRecord is a message written to an outbox: encoded bytes and an
// envelope built by the same rules Publish uses (broker.Conn.Prepare), so
// that a message relayed from the outbox is indistinguishable on the wire
// from one published directly. It holds bytes rather than a value because
// it outlives the process that wrote it, and the payload's type may not
// survive the deployment that happens while it waits.
//
// Outgoing.Mandatory is ignored: the relay always publishes mandatory.
type OutboxRecord struct {
	broker.Outgoing
	// ID is the store's identity for the record, assigned when it is
	// added; records are relayed in the order of their ids.
	ID string
	// Attempts is how many publishes of the record the broker refused so
	// far (stores that count them).
	Attempts int
	// LastError is why the broker last refused the record, or "".
	LastError string
	// CreatedAt is when the record was added.
	CreatedAt time.Time
}

// Destination says where the record is going.
func (r OutboxRecord) Destination() OutboxDestination {
	return OutboxDestination{Exchange: r.Exchange, RoutingKey: r.RoutingKey}
}

// Record builds an outbox record for payload exactly as conn.Publish would
// build the message, with the same options (broker.To, broker.ToExchange,
// broker.Type, ...). Inside a handler the correlation id is carried forward
// from the message being handled. It fails where Prepare fails (a payload
// the codec cannot encode, a reserved header, an invalid option) and
// refuses a nil conn.
func Record(ctx context.Context, conn *broker.Conn, payload any, opts ...broker.PublishOption) (OutboxRecord, error) {
	if conn == nil {
		return OutboxRecord{}, fmt.Errorf("outbox record: %w: nil connection", broker.ErrInvalidOption)
	}
	out, err := conn.Prepare(ctx, payload, opts...)
	if err != nil {
		return OutboxRecord{}, fmt.Errorf("outbox record: %w", err)
	}
	out.Mandatory = true
	return OutboxRecord{Outgoing: out}, nil
}

// OutboxDestination is where a record was going: what OnError is told so
// that an alert can say "the outbox cannot reach orders-events". Both
// fields are empty when the store failed, because nothing had been claimed.
type OutboxDestination struct {
	// Exchange is the record's exchange ("" = the default exchange).
	Exchange string
	// RoutingKey is the record's routing key (the queue, on the default
	// exchange).
	RoutingKey string
}

// OutboxStore is what an OutboxRelay reads. Adding is not part of it: a
// store is only worth having if adding joins the caller's transaction, and
// how that is spelled depends on the store (see persistence.SQLOutboxStore).
//
// Pending claims up to limit records for the caller, as a lease, in the
// order they were added, and returns what this call won: a record another
// claimant holds under a live lease is not returned. MarkPublished removes
// records the broker confirmed. Unless documented otherwise, a store
// instance is one claimant: give each relay its own.
type OutboxStore interface {
	Pending(ctx context.Context, limit int) ([]OutboxRecord, error)
	MarkPublished(ctx context.Context, ids ...string) error
}

// OutboxFailureMarker is an OutboxStore that counts the broker's refusals:
// MarkFailed records one failed attempt of a record the caller holds
// (claimed, and not since marked, released or taken over by another
// claimant) and releases its lease; for any other record it does nothing,
// so one claim is at most one attempt and a claimant that lost a record
// cannot count against the one that has it. A record refused too often
// stops being claimed and stays for somebody to inspect, rather than being
// tried for ever. The relay calls it when the store has it.
type OutboxFailureMarker interface {
	MarkFailed(ctx context.Context, id string, cause error) error
}

// OutboxReleaser is an OutboxStore that can give leases back without
// counting an attempt, for records a sweep claimed but did not finish (it
// stopped at a failure, or the broker could not be reached). Without it
// they wait for their lease to expire.
type OutboxReleaser interface {
	Release(ctx context.Context, ids ...string) error
}

// OutboxLookahead is an OutboxStore that can claim the batch after the one
// its caller is publishing: PendingAfter claims like Pending, except that
// the records in held (the caller's current batch, claimed and not yet
// settled) neither stop the claim nor are returned; every other live lease,
// the caller's own included, still stops it. A relay over a store that is
// also an OutboxReleaser claims its next batch while the current one waits
// for its confirms, so the claim costs no time of its own. It publishes
// that batch only once the current one is settled, and gives it back
// unpublished when the current one fails or the relay is closing, so order
// and the other guarantees of OutboxRelay are unchanged.
type OutboxLookahead interface {
	PendingAfter(ctx context.Context, held []string, limit int) ([]OutboxRecord, error)
}

// OutboxLeaseExtender is an OutboxStore whose leases a relay renews while
// it is still publishing the records they cover, so that a batch slower
// than a lease (a broker under flow control, a long publish timeout) is not
// taken over by a second relay halfway, which would publish it twice and
// out of order. Lease says how long a claim lasts; Extend renews the
// caller's leases on ids for another Lease and leaves records it no longer
// holds (released, marked, or taken over by another claimant) alone. A
// lease that ran out but that nobody took over is still the caller's and
// is renewed: a relay that renews late, after a pause longer than the
// lease, is still publishing those records, and letting them go then
// would have a second relay publish them again halfway. The relay extends
// every Lease/3 while it holds records.
type OutboxLeaseExtender interface {
	Lease() time.Duration
	Extend(ctx context.Context, ids ...string) error
}

// OutboxNotifier is an OutboxStore that can tell a relay a record may have
// been added, so the relay sweeps at once instead of at its next interval.
// Listen calls wake (which never blocks) whenever that may be so, and once
// after it starts listening; it runs until ctx is done (returning ctx's
// error) or listening fails. A store that cannot listen in its current
// configuration returns an error matching ErrOutboxCannotListen, and the
// relay then polls only.
type OutboxNotifier interface {
	Listen(ctx context.Context, wake func()) error
}
