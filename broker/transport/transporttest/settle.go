package transporttest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

var settleTests = map[string]func(*testing.T, suite){
	"GetOnEmptyQueueReturnsNil": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "empty", nil)
		d, err := tr.Get(ctx(t), q)
		require.NoError(t, err)
		require.Nil(t, d)
	},
	"AckRemoves": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "ack", nil)
		publish(t, tr, "", q, "m")
		worker := s.connect(t)
		sub := consume(t, worker, q, 1)
		require.NoError(t, receive(t, sub, arrival).Ack())
		// Closing would requeue the message had the ack not removed it.
		require.NoError(t, worker.Close(ctx(t)))
		watch := consume(t, tr, q, 1)
		nothing(t, watch)
		require.Equal(t, 0, ready(t, tr, q))
	},
	"NackRequeueRedelivers": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "requeue", nil)
		publish(t, tr, "", q, "m")
		d := get(t, tr, q)
		require.False(t, d.Redelivered)
		require.NoError(t, d.Nack(true))
		again := get(t, tr, q)
		require.True(t, again.Redelivered)
		require.Equal(t, "m", again.MessageID)
		require.NoError(t, again.Ack())
	},
	"NackWithoutDeadLetterExchangeDrops": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "nack-drop", nil)
		publish(t, tr, "", q, "m")
		require.NoError(t, get(t, tr, q).Nack(false))
		watch := consume(t, tr, q, 1)
		nothing(t, watch)
	},
	"SettlingTwiceIsRefused": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "twice", nil)
		publish(t, tr, "", q, "m1")
		publish(t, tr, "", q, "m2")
		d := get(t, tr, q)
		require.NoError(t, d.Ack())
		require.ErrorIs(t, d.Ack(), transport.ErrAlreadySettled)
		require.ErrorIs(t, d.Nack(true), transport.ErrAlreadySettled)

		sub := consume(t, tr, q, 1)
		c := receive(t, sub, arrival)
		require.NoError(t, c.Nack(false))
		require.ErrorIs(t, c.Ack(), transport.ErrAlreadySettled)
		require.ErrorIs(t, c.Nack(false), transport.ErrAlreadySettled)
	},
}
