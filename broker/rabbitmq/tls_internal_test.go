package rabbitmq

import (
	"crypto/tls"
	"errors"
	"io"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// A TLS 1.3 node's refusal of the client's certificate arrives after the
// handshake; amqp091 may report it only as a closed connection (its reader
// saw the alert and shut down before the protocol header was sent). The
// first read error of the TLS connection still makes it a *TLSError; what
// is no TLS failure stays what it was.
func TestTLSFailureReadsTheFirstReadError(t *testing.T) {
	t.Parallel()
	alert := tls.AlertError(116) // certificate_required
	for _, tc := range []struct {
		name      string
		err, read error
		want      error // the TLSError's Err, nil for none
	}{
		{"closed, after an alert was read", amqp.ErrClosed, alert, alert},
		{"the alert's text from amqp091", errors.New("remote error: tls: certificate required"), nil,
			errors.New("remote error: tls: certificate required")},
		{"closed, after an EOF was read", amqp.ErrClosed, io.EOF, nil},
		{"closed, nothing read", amqp.ErrClosed, nil, nil},
		{"refused credentials", amqp.ErrCredentials, alert, alert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tlsFailure(tc.err, tc.read, "127.0.0.1:5671", "127.0.0.1")
			var te *TLSError
			if tc.want == nil {
				require.False(t, errors.As(err, &te), "%v", err)
				require.Same(t, tc.err, err)
				return
			}
			require.ErrorAs(t, err, &te)
			require.Equal(t, "127.0.0.1:5671", te.Node)
			require.Equal(t, tc.want.Error(), te.Err.Error())
			require.Contains(t, err.Error(), "the node refused the handshake")
		})
	}
}
