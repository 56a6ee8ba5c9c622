package cli

import (
	"context"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/patterns"
)

// TestWorkerRefusesANegativeClaimTimeout: the flag is checked before
// anything is opened, and the error names it.
func TestWorkerRefusesANegativeClaimTimeout(t *testing.T) {
	t.Parallel()
	r := executeWith(t, invocation{flows: unitFlows("claim-")}, "worker", "--claim-timeout", "-1s")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--claim-timeout -1s: want 0 (the default, 5m0s) or more")
}

// TestStoreClaimTimeout: the worker's --claim-timeout is the lease of the
// claims its idempotency store takes: a claim taken with a lease of 300 ms
// is another worker's to take once it has run out, where the default lease
// (5 minutes) would keep it.
func TestStoreClaimTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url := testSchema(t)
	a := &app{databaseURL: url}
	cmd := &cobra.Command{}
	cmd.SetContext(ctx)
	// The session's stores, as a worker with --claim-timeout 300ms opens
	// them (migrated first: the test's schema is new).
	cfg := sessionConfig{claimTimeout: 300 * time.Millisecond}.database()
	cfg.Migrations = enginepg.ApplyMigrations
	d, err := a.openStores(cmd, cfg)
	require.NoError(t, err)
	defer d.Close()
	short := d.Idempotency()
	o, err := a.openStores(cmd, sessionConfig{}.database())
	require.NoError(t, err)
	defer o.Close()
	other := o.Idempotency()
	key := "claim-" + broker.NewID()
	c, err := short.Claim(ctx, key)
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c)
	c, err = other.Claim(ctx, key)
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimInProgress, c, "held while the lease runs")
	require.Eventually(t, func() bool {
		c, err := other.Claim(ctx, key)
		return err == nil && c == patterns.ClaimClaimed
	}, 5*time.Second, 50*time.Millisecond, "taken over once the 300 ms lease ran out")
}
