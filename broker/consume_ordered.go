package broker

import (
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// orderedJob is one delivery on its way to a worker, with its ordering key.
type orderedJob struct {
	d     *transport.Delivery
	m     *Message
	err   error
	key   string
	start time.Time
}

// startOrdered runs the consumer with OrderBy: one dispatcher reads the
// deliveries in the order the queue handed them over and keeps a FIFO per
// key, releasing a key's next message to the workers only when the one
// before it is settled. The broker never has more than prefetch deliveries
// outstanding, so channels of that capacity never block either side.
func (k *Consumer) startOrdered(workers *sync.WaitGroup) {
	jobs := make(chan orderedJob, k.cfg.prefetch)
	done := make(chan string, k.cfg.prefetch)
	for range k.cfg.concurrency {
		workers.Go(func() {
			for j := range jobs {
				if !k.requeueIfStopping(j.d) {
					k.processMessage(j.d, j.m, j.err, j.start, true)
				}
				k.hold(-1)
				if j.key != "" {
					done <- j.key
				}
			}
		})
	}
	workers.Go(func() {
		defer close(jobs)
		// waiting[key] exists while a message of key is with a worker; it
		// holds the ones that arrived behind it, in order.
		waiting := map[string][]orderedJob{}
		deliveries := k.sub.Deliveries()
		for deliveries != nil || len(waiting) > 0 {
			select {
			case d, ok := <-deliveries:
				if !ok {
					deliveries = nil
					continue
				}
				k.hold(1)
				j := orderedJob{d: d, start: k.conn.now()}
				j.m, j.err = k.message(d, j.start)
				if j.err == nil {
					j.key = safeKey(k.cfg.orderBy, j.m)
				}
				if j.key == "" {
					jobs <- j
					continue
				}
				if queue, busy := waiting[j.key]; busy {
					waiting[j.key] = append(queue, j)
					continue
				}
				waiting[j.key] = nil
				jobs <- j
			case key := <-done:
				queue := waiting[key]
				if len(queue) == 0 {
					delete(waiting, key)
					continue
				}
				waiting[key] = queue[1:]
				jobs <- queue[0]
			}
		}
	})
}

// safeKey runs a caller's key function; one that panics leaves the message
// unordered rather than taking the dispatcher down.
func safeKey(key func(*Message) string, m *Message) (k string) {
	defer func() {
		if recover() != nil {
			k = ""
		}
	}()
	return key(m)
}
