package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/flowtest"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/workflows"
)

// TestApproveRefund: a refund waits for its approval, then is paid, or
// not when refused; one that waits past two days, or is cancelled, has its
// hold released (compensated). On a clock the test moves.
func TestApproveRefund(t *testing.T) {
	t.Parallel()
	env := flowtest.New(t, workflows.ApproveRefund)
	refund := workflows.Refund{Order: "o-1", Customer: "Ada", AmountCents: 4200}

	approved := env.Start(refund)
	require.Equal(t, journal.Waiting, env.RunUntil(approved, journal.Waiting).Status)
	require.True(t, env.Signal(approved, "approval", workflows.Approval{By: "bob", Approved: true}).Resumed)
	env.RunUntil(approved, journal.Completed)
	require.Contains(t, env.Outcomes(approved), "step:pay-refund:completed")

	refused := env.Start(refund)
	env.RunUntil(refused, journal.Waiting)
	env.Signal(refused, "approval", workflows.Approval{By: "bob", Approved: false, Note: "not ours"})
	env.RunUntil(refused, journal.Completed)

	late := env.Start(refund)
	env.RunUntil(late, journal.Waiting)
	env.Advance(workflows.RefundWait + time.Minute)
	r := env.RunUntil(late, journal.Compensated)
	require.Contains(t, r.Error, dsl.ErrTimedOut.Error())
	require.Contains(t, env.Outcomes(late), "compensation:request-refund:compensated")

	cancelled := env.Start(refund)
	env.RunUntil(cancelled, journal.Waiting)
	env.CancelRun(cancelled, "the customer withdrew it")
	env.Settle()
	require.Equal(t, journal.Cancelled, env.Run(cancelled).Status)
	require.Contains(t, env.Outcomes(cancelled), "compensation:request-refund:compensated")
}
