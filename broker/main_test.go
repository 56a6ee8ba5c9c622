package broker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// consumer, ladder and transport goroutine has an owner that must stop it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
