package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CloseConnection force-closes, from the broker side, exactly the one
// connection whose client end is local (for example a transport's
// LocalAddr), as a network failure or an operator would: the client sees
// connection.close with 320 CONNECTION_FORCED. It uses rabbitmqctl and fails
// the test when the tool is missing or the connection is not found; other
// connections, which other test packages may be using on the same broker,
// are never touched.
func CloseConnection(tb testing.TB, local net.Addr) {
	tb.Helper()
	if local == nil {
		tb.Fatal("CloseConnection: no local address (is the transport connected?)")
	}
	prefix := local.String() + " -> "
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A connection that just opened can take a moment to be listed.
	for {
		// Lines are "<pid>\t<name>"; close_connection wants the pid.
		out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "list_connections", "pid", "name").CombinedOutput()
		if err != nil {
			tb.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			pid, name, ok := strings.Cut(strings.TrimSpace(line), "\t")
			if !ok || !strings.HasPrefix(name, prefix) {
				continue
			}
			out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "close_connection", pid, "test").CombinedOutput()
			if err != nil {
				tb.Fatalf("rabbitmqctl close_connection %s (%s): %v\n%s", pid, name, err, out)
			}
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("CloseConnection: no connection from %s among:\n%s", local, out)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CloseConnections force-closes, from the broker side and in one
// rabbitmqctl call, every connection whose client end is one of locals, as
// CloseConnection does for one: a fault injected into exactly this test's
// connections, however many, without touching anybody else's. It returns
// how many it closed and fails the test when rabbitmqctl fails.
func CloseConnections(tb testing.TB, locals ...net.Addr) int {
	tb.Helper()
	prefixes := make([]string, 0, len(locals))
	for _, l := range locals {
		if l != nil {
			prefixes = append(prefixes, fmt.Sprintf("%q", l.String()+" -> "))
		}
	}
	if len(prefixes) == 0 {
		return 0
	}
	// The connection's name is "<client> -> <server>"; close those whose
	// name starts with one of ours. A connection going away as we look is
	// skipped rather than failing the whole call.
	code := `Prefixes = [` + strings.Join(prefixes, ",") + `],
Mine = fun(P) ->
    case catch rabbit_networking:connection_info(P, [name]) of
        [{name, N}] -> lists:any(fun(Pre) -> lists:prefix(Pre, binary_to_list(N)) end, Prefixes);
        _ -> false
    end
end,
length([rabbit_networking:close_connection(P, "test") || P <- rabbit_networking:connections(), Mine(P)]).`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "eval", code).CombinedOutput()
	if err != nil {
		tb.Fatalf("rabbitmqctl eval (close connections): %v\n%s", err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		tb.Fatalf("rabbitmqctl eval (close connections) printed %q", out)
	}
	return n
}

// VHost creates a RabbitMQ virtual host of the test's own, lets guest use
// it, and returns the RabbitMQ test URL pointing at it; the virtual host,
// with everything in it (its policies too), is deleted when the test ends.
// For a test that must use fixed names (a shipped flow's exchange and
// queues, a policy's name) on a broker other tests share.
func VHost(tb testing.TB) string {
	tb.Helper()
	raw := RabbitURL(tb)
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("ACEMQ_TEST_URL: %v", err)
	}
	name := Name(tb, "vhost")
	rabbitmqctl(tb, "add_vhost", name)
	tb.Cleanup(func() { rabbitmqctl(tb, "delete_vhost", name) })
	user := "guest"
	if u.User != nil {
		user = u.User.Username()
	}
	rabbitmqctl(tb, "set_permissions", "-p", name, user, ".*", ".*", ".*")
	u.Path = "/" + name
	return u.String()
}

// SetPolicy sets a policy with rabbitmqctl set_policy in the virtual host
// of the RabbitMQ URL rawURL, as an operator does (docs/operations.md), and
// clears it when the test ends. Its name must be unique to the test, or its
// virtual host (VHost). definition is JSON, such as {"delivery-limit":20}.
func SetPolicy(tb testing.TB, rawURL, name, pattern, applyTo, definition string) {
	tb.Helper()
	vhost := vhostOf(tb, rawURL)
	rabbitmqctl(tb, "set_policy", "-p", vhost, "--apply-to", applyTo, name, pattern, definition)
	tb.Cleanup(func() { rabbitmqctl(tb, "clear_policy", "-p", vhost, name) })
}

// QueuePolicies is the policy RabbitMQ applies to each queue of the virtual
// host of rawURL ("" for none), as rabbitmqctl list_queues reads it from
// the queues themselves (the management API's copy lags by seconds).
func QueuePolicies(tb testing.TB, rawURL string) map[string]string {
	tb.Helper()
	out := rabbitmqctl(tb, "list_queues", "-p", vhostOf(tb, rawURL), "--no-table-headers", "name", "policy")
	policies := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		name, policy, _ := strings.Cut(line, "\t")
		policies[name] = strings.TrimSpace(policy)
	}
	return policies
}

// Policy is a policy as rabbitmqctl list_policies shows it.
type Policy struct {
	Pattern  string `json:"pattern"`
	ApplyTo  string `json:"apply-to"`
	Priority int    `json:"priority"`
	// Definition is the definition's JSON.
	Definition string `json:"definition"`
}

// Policies are the policies of the virtual host of rawURL, by name.
func Policies(tb testing.TB, rawURL string) map[string]Policy {
	tb.Helper()
	out := rabbitmqctl(tb, "list_policies", "-p", vhostOf(tb, rawURL), "--formatter", "json")
	var rows []struct {
		Name string `json:"name"`
		Policy
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		tb.Fatalf("rabbitmqctl list_policies printed %q: %v", out, err)
	}
	policies := make(map[string]Policy, len(rows))
	for _, r := range rows {
		policies[r.Name] = r.Policy
	}
	return policies
}

// vhostOf is the virtual host a RabbitMQ URL names, as amqp091-go reads it
// ("/" when it names none).
func vhostOf(tb testing.TB, rawURL string) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatalf("vhostOf: %v", err)
	}
	if v := strings.TrimPrefix(u.Path, "/"); v != "" {
		return v
	}
	return "/"
}

// rabbitmqctl runs rabbitmqctl -q with args and returns what it printed,
// failing the test when it fails.
func rabbitmqctl(tb testing.TB, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
