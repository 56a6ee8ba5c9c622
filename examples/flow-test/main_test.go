package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/flowtest"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestTrialConverts: the trial waits half an hour, then the card is
// charged. The test does not wait: RunUntil skips the half hour.
func TestTrialConverts(t *testing.T) {
	t.Parallel()
	billing := &Billing{Declined: "4000 0000 0000 0002"}
	env := flowtest.New(t, NewTrial(billing))
	billing.Now = env.Now
	ends := env.Now().Add(30 * time.Minute)
	run := env.Start(Trial{Customer: "Ada", Card: "4242 4242 4242 4242", EndsAt: ends})

	r := env.Run(run)
	require.Equal(t, journal.Waiting, r.Status, "waiting for the trial to end")
	require.True(t, ends.Equal(*r.DueAt))

	env.RunUntil(run, journal.Completed)
	require.Equal(t, []string{"start::started", "step:open:completed", "delay:charge:waiting", "step:charge:completed"},
		env.Outcomes(run))
	require.Equal(t, []string{"open acct-ada", "charge pay-acct-ada"}, billing.Calls())
	charged := billing.At("charge pay-acct-ada")
	require.False(t, charged.Before(ends), "never before the trial ends")
	require.Less(t, charged.Sub(ends), time.Second)
}

// TestDeclinedCardIsHeldThenClosed: a declined card fails the run, which
// is held an hour for a replay; once the hour has passed with none, the
// account is closed. Advance moves the clock by hand.
func TestDeclinedCardIsHeldThenClosed(t *testing.T) {
	t.Parallel()
	billing := &Billing{Declined: "4000 0000 0000 0002"}
	env := flowtest.New(t, NewTrial(billing))
	billing.Now = env.Now
	run := env.Start(Trial{Customer: "Grace", Card: billing.Declined, EndsAt: env.Now().Add(30 * time.Minute)})

	r := env.RunUntil(run, journal.Failed)
	require.Contains(t, r.Error, "card declined")
	require.True(t, env.Now().Add(TrialHold).Equal(*r.DueAt), "held an hour for a replay")

	env.Advance(59 * time.Minute)
	require.Equal(t, journal.Failed, env.Run(run).Status, "still held")
	env.Advance(time.Minute + time.Second) // the hour, and the second the ladder may take
	require.Equal(t, journal.Compensated, env.Run(run).Status)
	require.Equal(t, []string{"open acct-grace", "charge declined", "close acct-grace"}, billing.Calls())
	require.Equal(t, []string{"start::started", "step:open:completed", "delay:charge:waiting", "step:charge:failed",
		"compensation:open:compensated"}, env.Outcomes(run))
}

// TestDeclinedCardReplayed: the customer fixes the card within the hour;
// the run, replayed, completes, and nothing is closed when the hour ends.
func TestDeclinedCardReplayed(t *testing.T) {
	t.Parallel()
	billing := &Billing{Declined: "4000 0000 0000 0002"}
	env := flowtest.New(t, NewTrial(billing))
	run := env.Start(Trial{Customer: "Linus", Card: billing.Declined, EndsAt: env.Now().Add(30 * time.Minute)})
	env.RunUntil(run, journal.Failed)

	env.Advance(20 * time.Minute)
	billing.Declined = "" // the card works now
	env.Replay(run)
	env.RunUntil(run, journal.Completed)
	env.Advance(2 * time.Hour)
	require.Equal(t, journal.Completed, env.Run(run).Status)
	require.Equal(t, []string{"open acct-linus", "charge declined", "charge pay-acct-linus"}, billing.Calls())
}

// TestRun: the program, in real time.
func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	require.Regexp(t, `^a trial for Ada, ending a second from now: the run waits on the scheduler ladder
  \+0\.0s  start  started
  \+0\.0s  step open completed
  \+0\.0s  delay charge waiting
  \+[12]\.\ds  step charge completed
the service was asked: open acct-ada, charge pay-acct-ada
$`, out.String())
}
