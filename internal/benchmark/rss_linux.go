//go:build linux

package benchmark

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// resetPeakRSS sets the kernel's high-water mark of this process's
// resident set back to what it holds now (clear_refs 5), so that a
// measurement's peak is its own, not an earlier one's; false where the
// kernel refuses.
func resetPeakRSS() bool { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil }

// peakRSS is the high-water mark of this process's resident set since it
// started or since resetPeakRSS (VmHWM), in bytes; false where it cannot
// be read.
func peakRSS() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 3 && string(f[0]) == "VmHWM:" && string(f[2]) == "kB" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
