// Package testenv gates integration tests on the services they need and
// hands out names that cannot collide on a shared broker.
//
// Integration tests read ACEMQ_TEST_URL (default
// amqp://guest:guest@127.0.0.1:5672/) and ACEMQ_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test). When the service does not answer
// the test is skipped with a message naming the variable, unless
// ACEMQ_REQUIRE_SERVICES=1 (CI sets it), in which case it fails.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults for the service URLs.
const (
	DefaultRabbitURL   = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test"
)

// RabbitURL returns the RabbitMQ URL for integration tests, or skips (or
// fails, under ACEMQ_REQUIRE_SERVICES=1) when nothing answers there.
func RabbitURL(tb testing.TB) string {
	tb.Helper()
	return service(tb, "ACEMQ_TEST_URL", DefaultRabbitURL, "5672")
}

// DatabaseURL returns the PostgreSQL URL for integration tests, or skips (or
// fails, under ACEMQ_REQUIRE_SERVICES=1) when nothing answers there.
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	return service(tb, "ACEMQ_TEST_DATABASE_URL", DefaultDatabaseURL, "5432")
}

// Required reports whether missing services must fail tests.
func Required() bool { return os.Getenv("ACEMQ_REQUIRE_SERVICES") == "1" }

var (
	reachMu sync.Mutex
	reach   = map[string]error{}
)

func service(tb testing.TB, env, def, port string) string {
	tb.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("%s is not a URL: %v", env, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(strings.Trim(u.Hostname(), "[]"), port)
	}
	answers(tb, env, host, "set "+env+" to a reachable service to run this test")
	return raw
}

// ManagementURL returns the base URL of the RabbitMQ management API beside
// the test broker, where acemq-flow topology apply finds it: the host of
// ACEMQ_TEST_URL, port 15672. It skips (or fails, under
// ACEMQ_REQUIRE_SERVICES=1) when nothing answers there; .ci/run enables
// the plugin.
func ManagementURL(tb testing.TB) string {
	tb.Helper()
	u, err := url.Parse(RabbitURL(tb))
	if err != nil {
		tb.Fatalf("ACEMQ_TEST_URL is not a URL: %v", err)
	}
	host := net.JoinHostPort(strings.Trim(u.Hostname(), "[]"), "15672")
	answers(tb, "the management API beside ACEMQ_TEST_URL", host, "enable it (rabbitmq-plugins enable rabbitmq_management) to run this test")
	return "http://" + host + "/"
}

// answers skips the test, or fails it when services are required, unless
// something accepts a TCP connection at host; what names the service and
// remedy says how to provide it.
func answers(tb testing.TB, what, host, remedy string) {
	tb.Helper()
	reachMu.Lock()
	err, seen := reach[host]
	if !seen {
		var c net.Conn
		c, err = net.DialTimeout("tcp", host, 2*time.Second)
		if err == nil {
			c.Close()
		}
		reach[host] = err
	}
	reachMu.Unlock()
	if err != nil {
		if Required() {
			tb.Fatalf("%s (%s) does not answer and ACEMQ_REQUIRE_SERVICES=1: %v", what, host, err)
		}
		tb.Skipf("%s (%s: %v)", remedy, host, err)
	}
}

// Name returns a name unique to this test run, prefixed for reading in a
// management console: "acemq-test.<prefix>.<random>".
func Name(tb testing.TB, prefix string) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("random name: %v", err)
	}
	return "acemq-test." + prefix + "." + hex.EncodeToString(b[:])
}
