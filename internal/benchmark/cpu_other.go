//go:build !unix

package benchmark

import "time"

// processCPU is not measured here: no getrusage.
func processCPU() (time.Duration, bool) { return 0, false }
