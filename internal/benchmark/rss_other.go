//go:build !linux

package benchmark

// resetPeakRSS cannot be done here: no clear_refs.
func resetPeakRSS() bool { return false }

// peakRSS is not measured here: no VmHWM.
func peakRSS() (int64, bool) { return 0, false }
