package testenv

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// CloseConnection force-closes, from the broker side, exactly the one
// connection whose client end is local (for example a transport's
// LocalAddr), as a network failure or an operator would. It uses rabbitmqctl
// and fails the test when the tool is missing or the connection is not
// found; other connections, which other test packages may be using on the
// same broker, are never touched.
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
		out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "list_connections", "name").CombinedOutput()
		if err != nil {
			tb.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			name := strings.TrimSpace(line)
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "close_connection", name, "test").CombinedOutput()
			if err != nil {
				tb.Fatalf("rabbitmqctl close_connection %q: %v\n%s", name, err, out)
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
