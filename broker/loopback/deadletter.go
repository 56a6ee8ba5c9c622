package loopback

import (
	"slices"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// deadLetter republishes m, which left q for reason ("rejected", "expired",
// "maxlen" or "delivery_limit"), through q's x-dead-letter-exchange, the way
// RabbitMQ 3.10 does: routing key x-dead-letter-routing-key or the
// original, per-message expiration removed, x-death updated. Without a
// dead-letter exchange, or when it does not exist, the message is dropped
// silently, as RabbitMQ drops it.
func (b *Broker) deadLetter(q *queue, m *message, reason string, now time.Time) {
	if !q.cfg.hasDLX {
		return
	}
	ex, ok := b.exchanges[q.cfg.dlx]
	if !ok {
		return
	}
	key := m.routingKey
	if q.cfg.hasDLRK {
		key = q.cfg.dlrk
	}
	msg := m.msg
	msg.Headers = withDeath(msg.Headers, q.name, reason, m, now)
	msg.Expiration = ""
	deaths, _ := msg.Headers["x-death"].([]any)
	for _, target := range b.route(ex, key) {
		if reason != "rejected" && cycles(target.name, deaths) {
			continue
		}
		b.enqueue(target, &message{msg: msg, exchange: ex.name, routingKey: key}, now)
	}
}

// withDeath returns a copy of headers with the death of m in queue added to
// x-death: the entry for the same queue and reason has its count
// incremented and moves to the front, or a new entry is put in front. The
// x-first-death-* headers are set on the first death only.
func withDeath(headers transport.Table, queue, reason string, m *message, now time.Time) transport.Table {
	out := headers.Clone()
	if out == nil {
		out = transport.Table{}
	}
	deaths, _ := out["x-death"].([]any)
	if len(deaths) == 0 {
		out["x-first-death-reason"] = reason
		out["x-first-death-queue"] = queue
		out["x-first-death-exchange"] = m.exchange
	}
	var entry transport.Table
	rest := make([]any, 0, len(deaths))
	for _, d := range deaths {
		if t, ok := d.(transport.Table); ok && entry == nil && t["queue"] == queue && t["reason"] == reason {
			entry = t
			continue
		}
		rest = append(rest, d)
	}
	if entry != nil {
		n, _ := transport.Int(entry["count"])
		entry["count"] = n + 1
	} else {
		entry = transport.Table{
			"count":        int64(1),
			"reason":       reason,
			"queue":        queue,
			"time":         normalizeTime(now),
			"exchange":     m.exchange,
			"routing-keys": []any{m.routingKey},
		}
		if m.msg.Expiration != "" {
			entry["original-expiration"] = m.msg.Expiration
		}
	}
	out["x-death"] = append([]any{entry}, rest...)
	return out
}

// cycles reports whether dead-lettering into target closes a loop that no
// client rejection broke: RabbitMQ drops such a message rather than let it
// circle forever. deaths is the updated x-death, most recent first.
func cycles(target string, deaths []any) bool {
	i := slices.IndexFunc(deaths, func(d any) bool {
		t, ok := d.(transport.Table)
		return ok && t["queue"] == target
	})
	if i < 0 {
		return false
	}
	for _, d := range deaths[:i+1] {
		t, ok := d.(transport.Table)
		if !ok || t["reason"] == "rejected" {
			return false
		}
	}
	return true
}
