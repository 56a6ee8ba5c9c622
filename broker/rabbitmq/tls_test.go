package rabbitmq_test

import (
	"crypto/tls"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// tlsNode is a TLS listener in front of the test broker, as a node's
// amqps listener: its certificate is for localhost and 127.0.0.1, signed
// by ca, and it asks for a client certificate signed by ca.
type tlsNode struct {
	ca     *testenv.CA
	client testenv.Cert
	proxy  *testenv.Proxy
}

func startTLSNode(t *testing.T) tlsNode {
	t.Helper()
	ca := testenv.NewCA(t, "acemq-test-ca")
	server := ca.Issue(t, "localhost", "localhost", "127.0.0.1")
	proxy := testenv.StartProxy(t, rabbitAddr(t), &tls.Config{
		Certificates: []tls.Certificate{server.TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool,
		MinVersion:   tls.VersionTLS12,
	})
	return tlsNode{ca: ca, client: ca.Issue(t, "client"), proxy: proxy}
}

// url is an amqps:// URL of the node with password, and query.
func (n tlsNode) url(password string, query url.Values) string {
	u := url.URL{Scheme: "amqps", User: url.UserPassword("guest", password), Host: n.proxy.Addr(), Path: "/", RawQuery: query.Encode()}
	return u.String()
}

func (n tlsNode) query() url.Values {
	return url.Values{"cacertfile": {n.ca.CertFile}, "certfile": {n.client.CertFile}, "keyfile": {n.client.KeyFile}}
}

// Over TLS, with the CA, client certificate and key from the URL's query
// or from Config, messages go round trip.
func TestTLSConnects(t *testing.T) {
	t.Parallel()
	n := startTLSNode(t)
	for name, dial := range map[string]func() (*rabbitmq.Transport, error){
		"query": func() (*rabbitmq.Transport, error) {
			return rabbitmq.Dial(ctx(t), n.url("guest", n.query()), rabbitmq.Config{Logger: logger(t)})
		},
		"Config": func() (*rabbitmq.Transport, error) {
			return rabbitmq.Dial(ctx(t), n.url("guest", nil), rabbitmq.Config{Logger: logger(t),
				CAFile: n.ca.CertFile, CertFile: n.client.CertFile, KeyFile: n.client.KeyFile, ServerName: "localhost"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := dial()
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, tr.Close(ctx(t))) })
			require.Equal(t, n.proxy.Addr(), tr.Node())
			require.Equal(t, "amqps://guest@"+n.proxy.Addr()+"/", tr.Name(), "no password and no query")
			q := queue(t, tr, "tls")
			sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 1})
			require.NoError(t, err)
			publish(t, tr, "", q, "over-tls")
			d := receive(t, sub)
			require.Equal(t, "over-tls", d.MessageID)
			require.NoError(t, d.Ack())
			require.NoError(t, sub.Cancel(ctx(t)))
		})
	}
}

// A certificate that does not verify, a node that does not speak TLS and a
// client without the certificate the node asks for are each a *TLSError
// naming the node and saying what is wrong; nothing falls back to plain
// AMQP, and no error shows the password.
func TestTLSRefusals(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	n := startTLSNode(t)
	wrongCA := testenv.NewCA(t, "wrong-ca")
	with := func(changes map[string]string) url.Values {
		q := n.query()
		for k, v := range changes {
			if v == "" {
				q.Del(k)
			} else {
				q.Set(k, v)
			}
		}
		return q
	}
	plain := url.URL{Scheme: "amqps", User: url.UserPassword("guest", secret), Host: rabbitAddr(t), Path: "/", RawQuery: n.query().Encode()}
	for _, tc := range []struct {
		name, url, node, want string
	}{
		{"a wrong CA", n.url(secret, with(map[string]string{"cacertfile": wrongCA.CertFile})), n.proxy.Addr(),
			`(server name "127.0.0.1") failed: its certificate is not signed by a trusted CA (set cacertfile to the CA that signed it)`},
		{"the system roots", n.url(secret, with(map[string]string{"cacertfile": ""})), n.proxy.Addr(),
			"its certificate is not signed by a trusted CA"},
		{"another server name", n.url(secret, with(map[string]string{"server_name_indication": "rabbit.example"})), n.proxy.Addr(),
			`(server name "rabbit.example") failed: its certificate is not issued to that name`},
		{"no client certificate", n.url(secret, with(map[string]string{"certfile": "", "keyfile": ""})), n.proxy.Addr(),
			"the node refused the handshake (does it require a client certificate this one does not satisfy?)"},
		{"a plain AMQP port", plain.String(), rabbitAddr(t), "it does not speak TLS on this port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := rabbitmq.Dial(ctx(t), tc.url, rabbitmq.Config{Logger: logger(t)})
			var te *rabbitmq.TLSError
			require.ErrorAs(t, err, &te, "%v", err)
			require.Equal(t, tc.node, te.Node)
			require.ErrorContains(t, err, "TLS handshake with "+tc.node+" ")
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), secret)
			t.Log(err)
		})
	}
}

// TLS settings on an amqp:// URL are refused before anything is dialled.
func TestTLSSettingsOnPlainAMQPAreRefused(t *testing.T) {
	t.Parallel()
	n := startTLSNode(t)
	_, err := rabbitmq.Dial(ctx(t), "amqp://guest:s3cr3t@"+n.proxy.Addr()+"/?cacertfile="+n.ca.CertFile, rabbitmq.Config{Logger: logger(t)})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidTLS)
	require.ErrorContains(t, err, "cacertfile given for amqp://guest@"+n.proxy.Addr()+"/, which connects without TLS: use amqps://")
	require.NotContains(t, err.Error(), "s3cr3t")
}
