package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// PlaceOrderName is the name of the shipped place-order flow: its exchange
// and the prefix of its queues.
const PlaceOrderName = "place-order"

// The retry policies of place-order: short, so that a person trying the
// flow sees a step retried and given up in seconds, not hours. Ship's
// four attempts, 1 s, 2 s and 4 s apart, give a ship that keeps failing up
// after about ten seconds.
var (
	chargeRetry = broker.Exponential(3, time.Second)
	shipRetry   = broker.Exponential(4, time.Second)
)

// PlaceOrderHold is how long a failed place-order run waits for a replay
// before its completed steps are compensated.
const PlaceOrderHold = 10 * time.Minute

// PlaceOrder is the shipped place-order flow, on the stand-in services
// (NewStandIns). Its runs are Orders.
var PlaceOrder = NewPlaceOrder(PlaceOrderName, NewStandIns().Services())

// Flows is every flow shipped with the acemq-flow binary, for
// cli.Main(workflows.Flows()...).
func Flows() []*dsl.FlowDef {
	return []*dsl.FlowDef{PlaceOrder, ApproveRefund}
}

// Order is a place-order run's payload: what the customer asked for, and
// what the steps filled in on the way.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	// AmountCents is what the card is charged, in cents.
	AmountCents int `json:"amount_cents"`
	// Card is the card number: secret, kept as it is in messages and in
	// the run journal (a replay charges it), shown masked ("•••• 4242")
	// by the dashboard, the command line's output and the logs.
	Card string `json:"card" acemq:"secret"`
	// Address is where a physical order ships; a digital one has none.
	Address string `json:"address,omitempty"`
	// Digital orders are neither reserved nor shipped.
	Digital bool `json:"digital"`
	// ShipAt holds the order before it ships until then (RFC 3339); zero
	// or past ships at once.
	ShipAt time.Time `json:"ship_at,omitzero"`
	// CourierBackAt is when the stand-in courier can take this parcel
	// again (RFC 3339): before it, ship fails, as against a depot that is
	// closed, and is retried; a run given up then is replayed after it.
	CourierBackAt time.Time `json:"courier_back_at,omitzero"`

	// PaymentID is the gateway's payment, set by charge.
	PaymentID string `json:"payment_id,omitempty"`
	// Reservation is the stock held for the order, Booking the courier's
	// pick-up, both set by reserve.
	Reservation string `json:"reservation,omitempty"`
	Booking     string `json:"booking,omitempty"`
	// Tracking is the parcel's tracking number, set by ship.
	Tracking string `json:"tracking,omitempty"`
}

// Payments is a payment gateway.
type Payments interface {
	// Charge takes the order's amount from its card and returns the
	// payment's id.
	Charge(ctx context.Context, o Order) (string, error)
	// Refund gives o.PaymentID back.
	Refund(ctx context.Context, o Order) error
}

// Inventory holds stock for orders.
type Inventory interface {
	// Reserve holds the order's items and returns the reservation's id.
	Reserve(ctx context.Context, o Order) (string, error)
	// Release lets o.Reservation go.
	Release(ctx context.Context, o Order) error
}

// Courier picks parcels up and delivers them.
type Courier interface {
	// Book books a pick-up for the order and returns the booking's id.
	Book(ctx context.Context, o Order) (string, error)
	// Cancel cancels o.Booking.
	Cancel(ctx context.Context, o Order) error
	// Ship hands the parcel over and returns its tracking number.
	Ship(ctx context.Context, o Order) (string, error)
}

// Services are what place-order calls. Every one must be set.
type Services struct {
	Payments  Payments
	Inventory Inventory
	Courier   Courier
}

// NewPlaceOrder builds the place-order flow called name on s:
//
//	validate  check the order (a bad one is given up at once)
//	charge    charge the card; compensated by a refund; 3 attempts, 1 s doubling
//	reserve   physical orders only: two branches side by side, joined
//	          ├─ reserve-stock  hold the stock; compensated by releasing it
//	          └─ book-courier   book the pick-up; compensated by cancelling it
//	          (wait until payload.ship_at, when it is ahead)
//	ship      hand the parcel to the courier; physical orders only; 4 attempts,
//	          1 s doubling
//
// A run given up after charge is held for a replay for PlaceOrderHold,
// then compensated. A service of s left nil leaves its steps without a
// function, which the flow's Err reports.
func NewPlaceOrder(name string, s Services) *dsl.FlowDef {
	p := placeOrder{s}
	var (
		charge, reserveStock, book, ship func(context.Context, Order) (Order, error)
		refund, releaseStock, cancel     func(context.Context, Order) error
	)
	if s.Payments != nil {
		charge, refund = p.charge, p.refund
	}
	if s.Inventory != nil {
		reserveStock, releaseStock = p.reserveStock, p.releaseStock
	}
	if s.Courier != nil {
		book, cancel, ship = p.book, p.cancel, p.ship
	}
	return dsl.Flow(name,
		dsl.Step("validate", validate),
		dsl.Step("charge", charge).Compensate(refund).Retry(chargeRetry),
		dsl.Parallel("reserve",
			dsl.Branch(dsl.Step("reserve-stock", reserveStock).Compensate(releaseStock)),
			dsl.Branch(dsl.Step("book-courier", book).Compensate(cancel)),
		).Join(reserved).When(`payload.digital == false`),
		dsl.DelayUntil(`payload.ship_at`),
		dsl.Step("ship", ship).When(`payload.digital == false`).Retry(shipRetry),
		dsl.HoldForReplay(PlaceOrderHold),
		dsl.Example(ExampleOrder()),
	)
}

// ExampleOrder is the order `acemq-flow flows show place-order` offers to
// paste: one that goes straight through on the stand-ins.
func ExampleOrder() Order {
	return Order{
		ID: "o-1001", Customer: "Ada", Item: "coffee beans", Quantity: 2, AmountCents: 2400,
		Card: CardApproved, Address: "12 Harbour Street, Bristol",
	}
}

// placeOrder is the flow's steps on its services.
type placeOrder struct{ s Services }

// validate refuses an order no retry can fix: broker.Fatal, given up at
// once, with everything that is wrong with it.
func validate(_ context.Context, o Order) (Order, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(o.ID) == "" {
		bad("no id")
	}
	if strings.TrimSpace(o.Customer) == "" {
		bad("no customer")
	}
	if strings.TrimSpace(o.Item) == "" {
		bad("no item")
	}
	if o.Quantity < 1 {
		bad("quantity %d, want at least 1", o.Quantity)
	}
	if o.AmountCents < 1 {
		bad("amount_cents %d, want at least 1", o.AmountCents)
	}
	if strings.TrimSpace(o.Card) == "" {
		bad("no card")
	}
	if !o.Digital && strings.TrimSpace(o.Address) == "" {
		bad("no address to ship to")
	}
	if err := errors.Join(errs...); err != nil {
		return o, broker.Fatal(fmt.Errorf("order %q is invalid: %s", o.ID, strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	return o, nil
}

func (p placeOrder) charge(ctx context.Context, o Order) (Order, error) {
	id, err := p.s.Payments.Charge(ctx, o)
	if err != nil {
		return o, fmt.Errorf("charge %d cents: %w", o.AmountCents, err)
	}
	o.PaymentID = id
	return o, nil
}

func (p placeOrder) refund(ctx context.Context, o Order) error {
	if err := p.s.Payments.Refund(ctx, o); err != nil {
		return fmt.Errorf("refund payment %s: %w", o.PaymentID, err)
	}
	return nil
}

func (p placeOrder) reserveStock(ctx context.Context, o Order) (Order, error) {
	id, err := p.s.Inventory.Reserve(ctx, o)
	if err != nil {
		return o, fmt.Errorf("reserve %d x %s: %w", o.Quantity, o.Item, err)
	}
	o.Reservation = id
	return o, nil
}

func (p placeOrder) releaseStock(ctx context.Context, o Order) error {
	if err := p.s.Inventory.Release(ctx, o); err != nil {
		return fmt.Errorf("release reservation %s: %w", o.Reservation, err)
	}
	return nil
}

func (p placeOrder) book(ctx context.Context, o Order) (Order, error) {
	id, err := p.s.Courier.Book(ctx, o)
	if err != nil {
		return o, fmt.Errorf("book a courier: %w", err)
	}
	o.Booking = id
	return o, nil
}

func (p placeOrder) cancel(ctx context.Context, o Order) error {
	if err := p.s.Courier.Cancel(ctx, o); err != nil {
		return fmt.Errorf("cancel booking %s: %w", o.Booking, err)
	}
	return nil
}

// reserved joins reserve's branches: the order goes on with the stock's
// reservation and the courier's booking.
func reserved(_ context.Context, o, stock, booking Order) (Order, error) {
	o.Reservation, o.Booking = stock.Reservation, booking.Booking
	return o, nil
}

func (p placeOrder) ship(ctx context.Context, o Order) (Order, error) {
	tracking, err := p.s.Courier.Ship(ctx, o)
	if err != nil {
		return o, fmt.Errorf("ship: %w", err)
	}
	o.Tracking = tracking
	return o, nil
}
