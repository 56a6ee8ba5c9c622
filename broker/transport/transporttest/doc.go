// Package transporttest is the conformance suite every
// [transport.Transport] must pass: the loopback in-process and the RabbitMQ
// one against a real broker. RabbitMQ (3.10) is the reference: every
// assertion here is true of it, and a transport that differs is wrong.
//
// Call [Run] from a test with a function that opens a new connection to the
// same broker on every call. Every subtest runs in parallel, names its
// queues and exchanges with testenv.Name and deletes them when it ends.
package transporttest
