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
			tb.Fatalf("%s (%s) does not answer and ACEMQ_REQUIRE_SERVICES=1: %v", env, host, err)
		}
		tb.Skipf("set %s to a reachable service to run this test (%s: %v)", env, host, err)
	}
	return raw
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
