package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

// TestUnsendable: a hop the broker refused for what it is gives the run up;
// one refused for now (nacked while a quorum queue changes leader,
// unroutable, a channel error, a lost connection) is retried.
func TestUnsendable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{transport.ErrInvalidHeader, true},
		{transport.ErrInvalidExpiration, true},
		{fmt.Errorf("publish: %w", transport.ErrTooLarge), true},
		{transport.ErrNacked, false},
		{fmt.Errorf("publish to %q: %w", "f.ship", transport.ErrNacked), false},
		{transport.ErrUnroutable, false},
		{transport.ErrConnectionLost, false},
		{&transport.AMQPError{Code: 404, Reason: "NOT_FOUND - no exchange"}, false},
		{errors.New("anything else"), false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, unsendable(c.err), "%v", c.err)
	}
}
