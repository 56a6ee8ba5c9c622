package loopback

// deque is a ring buffer of messages: queues take from the head, publish to
// the tail and requeue to the head, all in constant time.
type deque struct {
	buf  []*message
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) grow() {
	if d.n < len(d.buf) {
		return
	}
	nb := make([]*message, max(16, 2*len(d.buf)))
	for i := range d.n {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(m *message) {
	d.grow()
	d.buf[(d.head+d.n)%len(d.buf)] = m
	d.n++
}

func (d *deque) pushFront(m *message) {
	d.grow()
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = m
	d.n++
}

// front returns the head without removing it, or nil when empty.
func (d *deque) front() *message {
	if d.n == 0 {
		return nil
	}
	return d.buf[d.head]
}

func (d *deque) popFront() *message {
	if d.n == 0 {
		return nil
	}
	m := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return m
}

// clear empties the deque and returns how many messages it held.
func (d *deque) clear() int {
	n := d.n
	*d = deque{}
	return n
}
