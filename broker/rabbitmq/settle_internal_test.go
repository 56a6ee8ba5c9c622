package rabbitmq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTakeAcks: which acks one flush writes, and how, for the deliveries a
// channel holds (H held, A acked, W written, tags 1..n in order).
func TestTakeAcks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		held    string
		upTo    uint64
		singles []uint64
		left    string
	}{
		{held: "AAAA", upTo: 4, left: ""},
		{held: "AAHA", upTo: 2, singles: []uint64{4}, left: "HW"},
		{held: "HAAA", singles: []uint64{2, 3, 4}, left: "HWWW"},
		{held: "WAWA", upTo: 4, left: ""},
		{held: "WWAH", upTo: 3, left: "H"},
		{held: "AWHAHA", upTo: 1, singles: []uint64{4, 6}, left: "HWHW"},
		{held: "HHH", left: "HHH"},
		{held: "AAAH", upTo: 3, left: "H"},
	} {
		t.Run(tc.held, func(t *testing.T) {
			h := &heldChannel{}
			for i, c := range tc.held {
				h.held = append(h.held, heldTag{tag: uint64(i + 1), state: map[rune]tagState{'H': tagHeld, 'A': tagAcked, 'W': tagWritten}[c]})
				if c == 'A' {
					h.acked++
				}
			}
			acked := h.acked
			upTo, singles, n := h.takeAcks()
			require.Equal(t, tc.upTo, upTo, "multiple ack up to")
			require.Equal(t, tc.singles, singles, "single acks")
			require.Equal(t, acked, n, "every ack taken")
			require.Zero(t, h.acked)
			left := ""
			for _, x := range h.held {
				left += map[tagState]string{tagHeld: "H", tagAcked: "A", tagWritten: "W"}[x.state]
			}
			require.Equal(t, tc.left, left, "still held")
		})
	}
}
