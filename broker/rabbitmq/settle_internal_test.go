package rabbitmq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTakeAcks: which acks one flush writes, and how, for the deliveries a
// channel holds (H held, A acked, tags 1..n in order), and what it still
// holds after.
func TestTakeAcks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		held    string
		upTo    uint64
		singles []uint64
		left    string
	}{
		{held: "AAAA", upTo: 4, left: ""},
		{held: "AAHA", upTo: 2, singles: []uint64{4}, left: "H"},
		{held: "HAAA", singles: []uint64{2, 3, 4}, left: "H"},
		{held: "AHAHA", upTo: 1, singles: []uint64{3, 5}, left: "HH"},
		{held: "HHH", left: "HHH"},
		{held: "AAAH", upTo: 3, left: "H"},
		{held: "HAHA", singles: []uint64{2, 4}, left: "HH"},
	} {
		t.Run(tc.held, func(t *testing.T) {
			h := &heldChannel{}
			for i, c := range tc.held {
				h.held = append(h.held, heldTag{tag: uint64(i + 1), state: map[rune]tagState{'H': tagHeld, 'A': tagAcked}[c]})
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
				left += map[tagState]string{tagHeld: "H", tagAcked: "A"}[x.state]
			}
			require.Equal(t, tc.left, left, "still held")
		})
	}
}

// TestHeldStaysBounded: while one delivery is held for long, the deliveries
// acked behind it leave held as their acks are written, so held never
// grows past what is unsettled, nor a flush's work with it.
func TestHeldStaysBounded(t *testing.T) {
	t.Parallel()
	h := &heldChannel{held: []heldTag{{tag: 1}}}
	for tag := uint64(2); tag <= 10_000; tag++ {
		h.held = append(h.held, heldTag{tag: tag, state: tagAcked})
		h.acked++
		upTo, singles, n := h.takeAcks()
		require.Zero(t, upTo)
		require.Equal(t, []uint64{tag}, singles)
		require.Equal(t, 1, n)
		require.Equal(t, []heldTag{{tag: 1}}, h.held)
	}
}
