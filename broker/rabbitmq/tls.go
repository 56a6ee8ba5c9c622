package rabbitmq

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
)

// The query parameters of an amqps:// URL that configure TLS: the names
// amqp091-go, RabbitMQ's URI specification and the other AceMQ clients read.
const (
	// QueryCACertFile names a PEM file of the CAs that sign the broker's
	// certificates (Config.CAFile).
	QueryCACertFile = "cacertfile"
	// QueryCertFile names a PEM client certificate (Config.CertFile).
	QueryCertFile = "certfile"
	// QueryKeyFile names the PEM key of the client certificate
	// (Config.KeyFile).
	QueryKeyFile = "keyfile"
	// QueryServerName is the name the broker's certificates must be issued
	// to (Config.ServerName).
	QueryServerName = "server_name_indication"
)

// ErrInvalidTLS is what every error about TLS settings matches with
// errors.Is: a file that cannot be read or holds no PEM certificate, a
// certificate without its key, or TLS settings on an amqp:// URL (which
// would otherwise connect without TLS).
var ErrInvalidTLS = errors.New("rabbitmq: invalid TLS settings")

// tlsSettings are a transport's TLS settings: Config's, with the URL's
// query parameters winning.
type tlsSettings struct {
	base                                  *tls.Config
	caFile, certFile, keyFile, serverName string
}

// newTLSSettings merges the TLS settings of u's query and cfg and checks
// that they can be loaded. It returns nil for an amqp:// URL, and refuses
// one that asks for anything TLS: a client that was told to verify the
// broker never connects without TLS instead.
func newTLSSettings(u brokerURL, cfg Config) (*tlsSettings, error) {
	s := &tlsSettings{base: cfg.TLS, caFile: cfg.CAFile, certFile: cfg.CertFile, keyFile: cfg.KeyFile, serverName: cfg.ServerName}
	var given []string
	for _, p := range []struct {
		param, field string
		to           *string
	}{
		{QueryCACertFile, "CAFile", &s.caFile},
		{QueryCertFile, "CertFile", &s.certFile},
		{QueryKeyFile, "KeyFile", &s.keyFile},
		{QueryServerName, "ServerName", &s.serverName},
	} {
		if v := u.query.Get(p.param); v != "" {
			*p.to = v
			given = append(given, p.param)
		} else if *p.to != "" {
			given = append(given, "Config."+p.field)
		}
	}
	if u.scheme != "amqps" {
		if cfg.TLS != nil {
			given = append(given, "Config.TLS")
		}
		if len(given) > 0 {
			return nil, fmt.Errorf("%w: %s given for %s, which connects without TLS: use amqps://", ErrInvalidTLS, strings.Join(given, ", "), u.redacted)
		}
		return nil, nil
	}
	if _, err := s.config(""); err != nil {
		return nil, err
	}
	return s, nil
}

// config builds the tls.Config for a handshake with a node whose host is
// host, reading the files again so that a renewed certificate is used on
// the next connection.
func (s *tlsSettings) config(host string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.base != nil {
		c = s.base.Clone()
	}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file (%s): %w", ErrInvalidTLS, QueryCACertFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s (%s) holds no PEM certificate", ErrInvalidTLS, s.caFile, QueryCACertFile)
		}
		c.RootCAs = pool
	}
	switch {
	case s.certFile != "" && s.keyFile != "":
		// Its errors name the problem, never the key's bytes.
		pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate %s and key %s (%s, %s): %w", ErrInvalidTLS, s.certFile, s.keyFile, QueryCertFile, QueryKeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case s.certFile != "":
		return nil, fmt.Errorf("%w: client certificate %s given without its key (%s)", ErrInvalidTLS, s.certFile, QueryKeyFile)
	case s.keyFile != "":
		return nil, fmt.Errorf("%w: client key %s given without its certificate (%s)", ErrInvalidTLS, s.keyFile, QueryCertFile)
	}
	switch {
	case s.serverName != "":
		c.ServerName = s.serverName
	case c.ServerName == "":
		c.ServerName = host
	}
	return c, nil
}

// TLSError is a TLS handshake with a node that failed: its certificate does
// not verify (an unknown CA, another host's name, expired), it does not
// speak TLS on that port, or it refused the client's certificate. The
// transport never falls back to plain AMQP.
type TLSError struct {
	// Node is the node's host:port; ServerName the name its certificate
	// was checked against.
	Node       string
	ServerName string
	Err        error
}

// Error names the node, the server name, what went wrong and the TLS
// library's own words.
func (e *TLSError) Error() string {
	return fmt.Sprintf("TLS handshake with %s (server name %q) failed: %s: %v", e.Node, e.ServerName, e.problem(), e.Err)
}

// Unwrap returns the TLS library's error.
func (e *TLSError) Unwrap() error { return e.Err }

// problem says in words what the TLS library's error means.
func (e *TLSError) problem() string {
	if v := verdict(e.Err); v != "" {
		return v
	}
	return "the node refused the handshake (does it require a client certificate this one does not satisfy?)"
}

// verdict says in words what a certificate or record error of the TLS
// library means, "" when err is none of those.
func verdict(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		return "its certificate is not signed by a trusted CA (set " + QueryCACertFile + " to the CA that signed it)"
	case errors.As(err, &hostname):
		return "its certificate is not issued to that name (set " + QueryServerName + " to a name it is issued to)"
	case errors.As(err, &invalid), errors.As(err, &verify):
		return "its certificate does not verify"
	case errors.As(err, &record):
		return "it does not speak TLS on this port (a plain AMQP port?)"
	}
	return ""
}

// tlsFailure wraps err as a *TLSError when it, or the first error a read
// of the TLS connection returned (read; nil when there was none), is a TLS
// failure: a handshake error, or an alert the node sent after the
// handshake. TLS 1.3 sends its verdict on the client's certificate then,
// and amqp091 reports that read's failure as text, or only as a closed
// connection when its reader shuts down first.
func tlsFailure(err, read error, node, serverName string) error {
	if isTLSFailure(err) {
		return &TLSError{Node: node, ServerName: serverName, Err: err}
	}
	if read != nil && isTLSFailure(read) {
		return &TLSError{Node: node, ServerName: serverName, Err: read}
	}
	return err
}

// isTLSFailure reports whether err is a certificate, record or alert error
// of the TLS library.
func isTLSFailure(err error) bool {
	var alert tls.AlertError
	return verdict(err) != "" || errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls:")
}

// readRecorder is a connection that remembers the first error a read
// returned, for tlsFailure.
type readRecorder struct {
	net.Conn
	mu  sync.Mutex
	err error
}

// Read reads from the connection and remembers its first error.
func (c *readRecorder) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	return n, err
}

// first returns the first error a read returned, nil for none or a nil c.
func (c *readRecorder) first() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
