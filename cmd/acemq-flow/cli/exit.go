package cli

import "errors"

// ExitInterrupted is the status a command exits with when SIGINT (Ctrl-C)
// or SIGTERM stopped it part way through and it reported what it had done
// (a bulk replay): 130, as a shell reports a command SIGINT ended, so that
// a script can tell an interrupted run from a failed one (status 1).
const ExitInterrupted = 130

// ErrInterrupted is what a command stopped part way by a signal returns,
// after its summary: run exits with ExitInterrupted for it.
var ErrInterrupted = errors.New("interrupted")

// exitStatus is the status a command that failed with err exits with.
func exitStatus(err error) int {
	if errors.Is(err, ErrInterrupted) {
		return ExitInterrupted
	}
	return 1
}
