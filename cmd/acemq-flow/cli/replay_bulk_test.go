package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestReplayBar: the bulk replay's bar shows the runs done of the total
// and the time taken and left.
func TestReplayBar(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	bar := newReplayBar(&b, 12)
	require.NoError(t, bar.Set(3))
	require.Contains(t, b.String(), "(3/12, ")
	require.Regexp(t, `\[\d+s:\d+s\]`, b.String(), "elapsed and left")
}

// TestExitStatus: an interrupted command exits 130, any other failure 1.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	require.Equal(t, ExitInterrupted, exitStatus(interrupted(engine.BulkResult{Interrupted: true})))
	require.Equal(t, 1, exitStatus(fmt.Errorf("replay: %w", context.Canceled)))
	require.Equal(t, 1, exitStatus(errors.New("boom")))
	require.NoError(t, interrupted(engine.BulkResult{}))
}

// TestBulkReplayInATerminal runs a bulk replay in tmux, a run a second:
// the bar counts towards the six runs chosen and shows the time left;
// Ctrl-C stops it between messages, the summary says what was replayed
// and that it was interrupted, the command exits 130 without a bare
// "context canceled", and exactly the runs it counted left the
// dead-letter queue.
func TestBulkReplayInATerminal(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	down := filepath.Join(t.TempDir(), "payments-down")
	require.NoError(t, os.WriteFile(down, nil, 0o600))
	fx.startWorker()
	var ids []string
	for i := range 6 {
		ids = append(ids, fx.start("orders", fmt.Sprintf(`{"id":"o%d","amount":%d,"fail_while":%q}`, i, 10+i, down)))
	}
	for _, id := range ids {
		fx.waitStatus(id, journal.Failed, 20*time.Second)
	}
	require.NoError(t, os.Remove(down))

	args := append(append([]string{"env"}, fx.env...), fx.bin, "replay", "--flow", fx.flow("orders"), "--status", "failed", "--rate", "1/s")
	s := runInTmux(t, args...)
	screen := s.waitFor(`replaying\s+\d+% .*\([2-4]/6, .*\[\d+s:[1-9]\d*s\]`) // the time left, from the rate
	t.Logf("before Ctrl-C:\n%s", screen)
	s.tmux("send-keys", "-t", "top", "C-c")
	require.Equal(t, ExitInterrupted, s.exitStatus())
	screen = s.tmux("capture-pane", "-p", "-J", "-t", "top") // wrapped lines joined
	t.Logf("after Ctrl-C:\n%s", screen)
	require.Contains(t, screen, "(interrupted: the rest was not touched)")
	require.NotContains(t, screen, "context canceled")
	m := regexp.MustCompile(`replayed (\d), skipped 0, not found 0, of 6 selected`).FindStringSubmatch(screen)
	require.NotNil(t, m, screen)
	n, _ := strconv.Atoi(m[1])
	require.True(t, n >= 1 && n < 6, "stopped part way: %d", n)
	require.Contains(t, screen, fmt.Sprintf("acemq-flow: replay: interrupted before it finished: %d of 6 chosen runs replayed, the rest not touched", n))

	failed := 0
	for _, id := range ids {
		r := fx.run("runs", "show", id, "-o", "json")
		require.Zero(t, r.code, r.stderr)
		if regexp.MustCompile(`"status": "failed"`).MatchString(r.stdout) {
			failed++
		}
	}
	require.Equal(t, 6-n, failed, "the runs it did not count were not touched")
}
