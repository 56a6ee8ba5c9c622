package rabbitmq

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/testenv"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw string
		nodes     []string // addr of every node
		redacted  string
		first     string // the first node's own URL, as amqp091 reads it
	}{
		{"one node, as before", "amqp://guest:guest@127.0.0.1:5672/", []string{"127.0.0.1:5672"},
			"amqp://guest@127.0.0.1:5672/", "amqp://guest:guest@127.0.0.1:5672/"},
		{"default ports", "amqps://u:pw@rabbit/", []string{"rabbit:5671"}, "amqps://u@rabbit/", "amqps://u:pw@rabbit/"},
		{"a list", "amqp://u:pw@a:5681,b:5682,c/vh?heartbeat=5", []string{"a:5681", "b:5682", "c:5672"},
			"amqp://u@a:5681,b:5682,c/vh", "amqp://u:pw@a:5681/vh?heartbeat=5"},
		{"IPv6 nodes", "amqp://u:pw@[::1]:5681,[::1]:5682/", []string{"[::1]:5681", "[::1]:5682"},
			"amqp://u@[::1]:5681,[::1]:5682/", "amqp://u:pw@[::1]:5681/"},
		{"an escaped vhost and password", "amqp://u:p%40ss@a,b/%2F", []string{"a:5672", "b:5672"},
			"amqp://u@a,b/%2F", "amqp://u:p%40ss@a/%2F"},
		{"no user", "amqp://a:1,b:2", []string{"a:1", "b:2"}, "amqp://a:1,b:2", "amqp://a:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := parseURL(tc.raw)
			require.NoError(t, err)
			require.Equal(t, tc.nodes, u.addrs())
			require.Equal(t, tc.redacted, u.redacted)
			require.Equal(t, tc.first, u.nodes[0].raw)
			for _, n := range u.nodes {
				require.NotContains(t, n.redacted, "pw")
			}
		})
	}
}

func TestParseURLRefuses(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t"
	for _, tc := range []struct{ raw, want string }{
		{"amqp://u:" + secret + "@a,,b/", `node 2 of the list "a,,b" is empty`},
		{"amqp://u:" + secret + "@a:5672,a/", "node a:5672 is listed twice"},
		{"amqp://u:" + secret + "@a:5672,b:0/", `node "b:0": port 0 is not between 1 and 65535`},
		{"amqp://u:" + secret + "@a,b:x/", `invalid port ":x" after host`},
		{"http://u:" + secret + "@a,b/", `scheme "http", want amqp or amqps`},
		{"amqp://u:" + secret + "@/", "no host"},
		{"amqp://u:" + secret + "@a, b/", "invalid character"},
		{"amqp://u:" + secret + "@a/ x", "contains whitespace"},
		{"amqp://u:" + secret + "%zz@a/", "invalid URL escape"},
		{"localhost:5672", `scheme "localhost", want amqp or amqps`},
		{"127.0.0.1", `scheme "", want amqp or amqps`},
		{"amqp:opaque", "no host"},
	} {
		_, err := parseURL(tc.raw)
		require.ErrorIs(t, err, ErrInvalidURL, tc.raw)
		require.ErrorContains(t, err, tc.want, tc.raw)
		require.NotContains(t, err.Error(), secret)
	}
}

func TestTLSSettings(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t, "acemq-test-ca")
	client := ca.Issue(t, "client", "client")
	other := testenv.NewCA(t, "other-ca").Issue(t, "other", "other")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("PRIVATE-KEY-MATERIAL"), 0o600))

	settings := func(raw string, cfg Config) (*tlsSettings, error) {
		u, err := parseURL(raw)
		require.NoError(t, err)
		return newTLSSettings(u, cfg)
	}
	q := "?cacertfile=" + ca.CertFile + "&certfile=" + client.CertFile + "&keyfile=" + client.KeyFile

	t.Run("amqp:// needs none", func(t *testing.T) {
		s, err := settings("amqp://u:pw@a/", Config{})
		require.NoError(t, err)
		require.Nil(t, s)
	})
	t.Run("defaults", func(t *testing.T) {
		s, err := settings("amqps://u:pw@a,b/", Config{})
		require.NoError(t, err)
		c, err := s.config("b")
		require.NoError(t, err)
		require.Equal(t, "b", c.ServerName, "each node's host by default")
		require.Nil(t, c.RootCAs, "the system roots")
		require.Equal(t, uint16(tls.VersionTLS12), c.MinVersion)
	})
	t.Run("from the query", func(t *testing.T) {
		s, err := settings("amqps://u:pw@a/"+q+"&server_name_indication=rabbit.internal", Config{})
		require.NoError(t, err)
		c, err := s.config("a")
		require.NoError(t, err)
		require.Equal(t, "rabbit.internal", c.ServerName)
		require.True(t, c.RootCAs.Equal(ca.Pool))
		require.Len(t, c.Certificates, 1)
	})
	t.Run("from Config, the query winning", func(t *testing.T) {
		s, err := settings("amqps://u:pw@a/?cacertfile="+ca.CertFile, Config{CAFile: notPEM, CertFile: client.CertFile, KeyFile: client.KeyFile,
			ServerName: "rabbit.internal", TLS: &tls.Config{MinVersion: tls.VersionTLS13}})
		require.NoError(t, err)
		c, err := s.config("a")
		require.NoError(t, err)
		require.True(t, c.RootCAs.Equal(ca.Pool))
		require.Equal(t, "rabbit.internal", c.ServerName)
		require.Equal(t, uint16(tls.VersionTLS13), c.MinVersion)
		require.Len(t, c.Certificates, 1)
	})

	for _, tc := range []struct {
		name, raw string
		cfg       Config
		want      string
	}{
		{"TLS settings on amqp://", "amqp://u:pw@a/" + q, Config{}, "cacertfile, certfile, keyfile given for amqp://u@a/, which connects without TLS: use amqps://"},
		{"Config.CAFile on amqp://", "amqp://u:pw@a/", Config{CAFile: ca.CertFile}, "Config.CAFile given for amqp://u@a/"},
		{"Config.TLS on amqp://", "amqp://u:pw@a/", Config{TLS: &tls.Config{}}, "Config.TLS given"},
		{"a missing CA file", "amqps://u:pw@a/?cacertfile=/nonexistent/ca.pem", Config{}, "CA file (cacertfile): open /nonexistent/ca.pem: no such file or directory"},
		{"a CA file of no PEM", "amqps://u:pw@a/?cacertfile=" + notPEM, Config{}, "CA file " + notPEM + " (cacertfile) holds no PEM certificate"},
		{"a certificate without its key", "amqps://u:pw@a/?certfile=" + client.CertFile, Config{}, "given without its key (keyfile)"},
		{"a key without its certificate", "amqps://u:pw@a/", Config{KeyFile: client.KeyFile}, "given without its certificate (certfile)"},
		{"a key of another certificate", "amqps://u:pw@a/?certfile=" + client.CertFile + "&keyfile=" + other.KeyFile, Config{}, "private key does not match public key"},
		{"a key file of no PEM", "amqps://u:pw@a/?certfile=" + client.CertFile + "&keyfile=" + notPEM, Config{}, "failed to find any PEM data in key input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := settings(tc.raw, tc.cfg)
			require.ErrorIs(t, err, ErrInvalidTLS)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "pw")
			require.NotContains(t, err.Error(), "PRIVATE-KEY-MATERIAL")
		})
	}
}
