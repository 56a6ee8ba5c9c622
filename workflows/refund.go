package workflows

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// RefundName is the name of the shipped approve-refund flow.
const RefundName = "approve-refund"

// RefundWait is how long an approve-refund run waits for its approval.
const RefundWait = 48 * time.Hour

// Refund is an approve-refund run's payload: whose order, how much.
type Refund struct {
	Order       string `json:"order"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
	// Hold is filled in by request-refund: the hold put on the amount.
	Hold string `json:"hold,omitempty"`
}

// Approval is the signal an approve-refund run waits for: who decided,
// and whether the refund goes ahead.
type Approval struct {
	By       string `json:"by"`
	Approved bool   `json:"approved"`
	Note     string `json:"note,omitempty"`
}

// Refunded is what an approve-refund run ends with.
type Refunded struct {
	Order       string `json:"order"`
	AmountCents int    `json:"amount_cents"`
	Paid        bool   `json:"paid"`
	DecidedBy   string `json:"decided_by"`
}

// ApproveRefund is the shipped approve-refund flow: request-refund puts a
// hold on the amount (released by its compensation), then the run waits
// up to RefundWait for a person's approval (the signal "approval", an
// Approval), and pay-refund pays it, or does not when it was refused. A
// run that waits past RefundWait, or is cancelled, has its hold released.
var ApproveRefund = NewApproveRefund(RefundName)

// NewApproveRefund builds the approve-refund flow under name.
func NewApproveRefund(name string) *dsl.FlowDef {
	return dsl.Flow(name,
		dsl.Step("request-refund", func(_ context.Context, r Refund) (Refund, error) {
			if r.AmountCents < 1 {
				return r, broker.Fatal(fmt.Errorf("refund of order %s: amount %d cents, want at least 1", r.Order, r.AmountCents))
			}
			r.Hold = "hold-" + r.Order
			return r, nil
		}).Compensate(func(context.Context, Refund) error { return nil }),
		dsl.WaitFor[Refund, Approval]("approval", RefundWait),
		dsl.Step("pay-refund", func(_ context.Context, s dsl.Signalled[Refund, Approval]) (Refunded, error) {
			return Refunded{Order: s.Input.Order, AmountCents: s.Input.AmountCents, Paid: s.Signal.Approved, DecidedBy: s.Signal.By}, nil
		}),
		dsl.Example(Refund{Order: "o-1001", Customer: "Ada", AmountCents: 4200}))
}
