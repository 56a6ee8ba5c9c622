package journal

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidVersion is what a VersionStore's refusals match: a flow or a
// version that is not Text, or a step name that is not.
var ErrInvalidVersion = errors.New("invalid flow version")

// FlowVersion is one version of a flow that a worker served: its
// fingerprint (engine.FlowInfo.Version), the steps it had (their queues
// are <flow>.<step>), and when workers of it started first and last.
type FlowVersion struct {
	Flow      string    `json:"flow"`
	Version   string    `json:"version"`
	Steps     []string  `json:"steps"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

// VersionStore is a journal that remembers the versions of each flow its
// workers served, so that a worker of a new version knows the steps of
// the old ones (whose queues may still hold runs), and counts the runs in
// flight at each step. Both shipped journals implement it; the Memory
// journal remembers only what its own process served.
type VersionStore interface {
	// RecordVersion remembers v as served at at: a version seen before
	// keeps its FirstSeen and Steps, and its LastSeen moves to at.
	RecordVersion(ctx context.Context, v FlowVersion, at time.Time) error
	// Versions are the versions of flow recorded, the first seen first.
	Versions(ctx context.Context, flow string) ([]FlowVersion, error)
	// InFlight counts flow's runs that are running or waiting, by the
	// step they are at.
	InFlight(ctx context.Context, flow string) (map[string]int, error)
}

// CheckVersion refuses, with an error matching ErrInvalidVersion, a
// version no VersionStore can keep.
func CheckVersion(v FlowVersion) error {
	if v.Flow == "" || !Text(v.Flow) || v.Version == "" || !Text(v.Version) {
		return fmt.Errorf("%w: flow %q version %q: want non-empty text", ErrInvalidVersion, v.Flow, v.Version)
	}
	for _, s := range v.Steps {
		if s == "" || !Text(s) {
			return fmt.Errorf("%w: flow %q version %q: step %q", ErrInvalidVersion, v.Flow, v.Version, s)
		}
	}
	return nil
}
