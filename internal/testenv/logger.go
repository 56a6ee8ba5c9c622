package testenv

import (
	"log/slog"
	"testing"
)

// Logger returns a logger that writes to t.Log, so a test's logs appear
// with the test that produced them and only when it fails (or under -v).
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(p))
	return len(p), nil
}
