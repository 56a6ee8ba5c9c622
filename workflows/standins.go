package workflows

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
)

// Test cards of the stand-in payment gateway, written as a person would
// type them (spaces and dashes are ignored). Any other card is approved.
const (
	// CardApproved is approved.
	CardApproved = "4242 4242 4242 4242"
	// CardDeclined is declined: broker.Fatal, no retry can help.
	CardDeclined = "4000 0000 0000 0002"
	// CardTimesOutOnce times the gateway out on an order's first charge,
	// and is approved on the next.
	CardTimesOutOnce = "4000 0000 0000 0119"
)

// OutOfStockItem is an item the stand-in inventory never has.
const OutOfStockItem = "unobtainium"

// NoDeliveryTo is a place the stand-in courier refuses to deliver to: an
// order whose address contains it (in any case) cannot be booked.
const NoDeliveryTo = "Atlantis"

// OutageEnv names the environment variable that simulates an outage: while
// it names a step of place-order (charge, reserve or ship), the stand-in
// service behind that step fails every call with an outage error, which
// the step's retry policy retries. It is read at each call, so a worker
// restarted without it ends the outage.
const OutageEnv = "ACEMQ_DEMO_OUTAGE"

// ErrOutage is what a stand-in service fails with during a simulated
// outage (OutageEnv).
var ErrOutage = errors.New("service unavailable")

// StandIns are deterministic stand-ins for the services of place-order, a
// payment gateway, an inventory and a courier, whose behaviour each order
// chooses: its card (CardDeclined, CardTimesOutOnce), its item
// (OutOfStockItem), its address (NoDeliveryTo), its CourierBackAt, and
// OutageEnv. Ids they
// hand out are made from the order's id. They do nothing else and log
// nothing. Safe for concurrent use.
type StandIns struct {
	// Outage is the step whose service is down, read at each call (nil =
	// the OutageEnv environment variable).
	Outage func() string
	// Now is the stand-ins' clock, for CourierBackAt (nil = time.Now).
	Now func() time.Time

	mu sync.Mutex
	// timedOut holds the orders the gateway timed out on once, until the
	// charge that succeeds.
	timedOut map[string]bool
}

// NewStandIns returns stand-ins with no order seen yet.
func NewStandIns() *StandIns { return &StandIns{timedOut: map[string]bool{}} }

// Services is the stand-ins as place-order's services.
func (s *StandIns) Services() Services {
	return Services{Payments: s, Inventory: s, Courier: s}
}

// down fails with ErrOutage while the outage names step.
func (s *StandIns) down(step, service string) error {
	name := os.Getenv(OutageEnv)
	if s.Outage != nil {
		name = s.Outage()
	}
	if strings.TrimSpace(name) != step {
		return nil
	}
	return fmt.Errorf("%s: %w (outage simulated by %s=%s)", service, ErrOutage, OutageEnv, step)
}

// Charge approves the order's card, or declines it, or times out once.
func (s *StandIns) Charge(_ context.Context, o Order) (string, error) {
	if err := s.down("charge", "payment gateway"); err != nil {
		return "", err
	}
	switch card(o.Card) {
	case card(CardDeclined):
		// The card is secret: an error goes to the journal and the logs
		// as it is, so it names the card as a receipt does.
		return "", broker.Fatal(fmt.Errorf("payment gateway: card %s declined", engine.Mask(o.Card)))
	case card(CardTimesOutOnce):
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.timedOut[o.ID] {
			s.timedOut[o.ID] = true
			return "", errors.New("payment gateway timed out")
		}
		delete(s.timedOut, o.ID)
	}
	return "pay-" + o.ID, nil
}

// card is a card number without its spaces and dashes.
func card(number string) string {
	return strings.NewReplacer(" ", "", "-", "").Replace(number)
}

// Refund always succeeds.
func (s *StandIns) Refund(context.Context, Order) error { return nil }

// Reserve holds the stock, unless the item is OutOfStockItem.
func (s *StandIns) Reserve(_ context.Context, o Order) (string, error) {
	if err := s.down("reserve", "inventory"); err != nil {
		return "", err
	}
	if strings.EqualFold(strings.TrimSpace(o.Item), OutOfStockItem) {
		return "", broker.Fatal(fmt.Errorf("inventory: %s is out of stock", o.Item))
	}
	return "res-" + o.ID, nil
}

// Release always succeeds.
func (s *StandIns) Release(context.Context, Order) error { return nil }

// Book books a pick-up, unless the address is NoDeliveryTo.
func (s *StandIns) Book(_ context.Context, o Order) (string, error) {
	if err := s.down("reserve", "courier"); err != nil {
		return "", err
	}
	if strings.Contains(strings.ToLower(o.Address), strings.ToLower(NoDeliveryTo)) {
		return "", broker.Fatal(fmt.Errorf("courier: no deliveries to %q", o.Address))
	}
	return "pickup-" + o.ID, nil
}

// Cancel always succeeds.
func (s *StandIns) Cancel(context.Context, Order) error { return nil }

// Ship hands the parcel over and returns its tracking number.
func (s *StandIns) Ship(_ context.Context, o Order) (string, error) {
	if err := s.down("ship", "courier"); err != nil {
		return "", err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if back := o.CourierBackAt; now().Before(back) {
		return "", fmt.Errorf("courier: the depot is closed until %s", back.Format(time.TimeOnly))
	}
	return "TRK-" + o.ID, nil
}
