package loopback

// deque is a ring buffer of messages: queues take from the head and publish
// to the tail in constant time, and put a message back anywhere in between
// in time proportional to its distance from the nearer end (requeued
// messages go back near the head).
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

// insert puts m at index i (0 is the head, len the tail), moving whichever
// side of i is shorter by one place.
func (d *deque) insert(i int, m *message) {
	d.grow()
	size := len(d.buf)
	if i < d.n-i {
		d.head = (d.head - 1 + size) % size
		for k := range i {
			d.buf[(d.head+k)%size] = d.buf[(d.head+k+1)%size]
		}
	} else {
		for k := d.n; k > i; k-- {
			d.buf[(d.head+k)%size] = d.buf[(d.head+k-1)%size]
		}
	}
	d.buf[(d.head+i)%size] = m
	d.n++
}

// at returns the message at index i, which must be below len.
func (d *deque) at(i int) *message { return d.buf[(d.head+i)%len(d.buf)] }

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
