package rabbitmq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The ports the management plugin listens on unless configured otherwise:
// management.tcp.port and management.ssl.port.
const (
	ManagementPort    = "15672"
	ManagementTLSPort = "15671"
)

// DefaultManagementTimeout bounds one request to the management API when
// ManagementConfig.Timeout is zero.
const DefaultManagementTimeout = 10 * time.Second

// ErrManagementUnavailable is what a request to the management API matches
// with errors.Is when nothing answered: nothing listens there (the plugin
// is not enabled), the host is unknown or the request timed out.
var ErrManagementUnavailable = errors.New("rabbitmq: the management API does not answer")

// ManagementConfig says where a Management client finds the API (a config
// struct: the zero value derives everything from the AMQP URL).
type ManagementConfig struct {
	// URL is the API's base URL, such as http://rabbit-1:15672/ (a path
	// prefix is kept: http://host/rabbitmq/). Its user and password, when
	// it has any, win over the AMQP URL's. "" derives it from the AMQP
	// URL: https for amqps://, http otherwise, on the host of Node, port
	// ManagementTLSPort or ManagementPort.
	URL string
	// Node is the host:port of the AMQP node whose host serves the API
	// (Transport.Node); "" is the URL's first node. Policies belong to the
	// cluster, so any node will do.
	Node string
	// Timeout bounds each request (0 = DefaultManagementTimeout).
	Timeout time.Duration
}

// Management is a client of the RabbitMQ management plugin's HTTP API, for
// what AMQP cannot do: setting a policy. It speaks for the AMQP URL's user
// in the URL's virtual host.
type Management struct {
	base           *url.URL
	user, password string
	vhost          string
	client         *http.Client
}

// Management returns a client of the management API of the broker at
// amqpURL, with c's TLS settings (and the URL's TLS query parameters) for
// an https API. It sends nothing. It refuses an AMQP URL Dial would refuse,
// a management URL that is not http:// or https:// with a host, and TLS
// settings that cannot be loaded.
func (c Config) Management(amqpURL string, mc ManagementConfig) (*Management, error) {
	if mc.Timeout < 0 {
		return nil, fmt.Errorf("%w: management Timeout %v is negative", ErrInvalidConfig, mc.Timeout)
	}
	if mc.Timeout == 0 {
		mc.Timeout = DefaultManagementTimeout
	}
	u, err := parseURL(amqpURL)
	if err != nil {
		return nil, err
	}
	first, err := parseOne(u.nodes[0].raw)
	if err != nil {
		return nil, err
	}
	// amqp091-go's defaults for a URL without them.
	m := &Management{user: "guest", password: "guest", vhost: vhostOf(first)}
	setUser(first.User, &m.user, &m.password)
	host := u.nodes[0].host
	if mc.Node != "" {
		if host, _, err = net.SplitHostPort(mc.Node); err != nil {
			return nil, fmt.Errorf("%w: management node %q: %v", ErrInvalidConfig, mc.Node, err)
		}
	}
	if mc.URL == "" {
		scheme, port := "http", ManagementPort
		if u.scheme == "amqps" {
			scheme, port = "https", ManagementTLSPort
		}
		m.base = &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: "/"}
	} else if m.base, err = parseManagementURL(mc.URL); err != nil {
		return nil, err
	} else {
		setUser(m.base.User, &m.user, &m.password)
		m.base.User = nil
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A request now and then: no idle connection (and its goroutines) left
	// open behind it.
	transport.DisableKeepAlives = true
	if m.base.Scheme == "https" {
		if s, err := newTLSSettings(u, c); err != nil {
			return nil, err
		} else if s != nil {
			if transport.TLSClientConfig, err = s.config(m.base.Hostname()); err != nil {
				return nil, err
			}
		}
	}
	m.client = &http.Client{Transport: transport, Timeout: mc.Timeout}
	return m, nil
}

// setUser sets user, and password when it has one, from the user info
// of a URL that has any.
func setUser(info *url.Userinfo, user, password *string) {
	if info == nil {
		return
	}
	*user = info.Username()
	if p, ok := info.Password(); ok {
		*password = p
	}
}

// vhostOf is the virtual host an AMQP URL names, as amqp091-go reads it:
// the path without its leading slash, unescaped, and "/" for none.
func vhostOf(u *url.URL) string {
	if v := strings.TrimPrefix(u.Path, "/"); v != "" {
		return v
	}
	return "/"
}

// parseManagementURL checks a management URL without quoting it (it may
// carry a password) in its errors.
func parseManagementURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: management URL: %v", ErrInvalidURL, unwrapURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: management URL: scheme %q, want http or https", ErrInvalidURL, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: management URL: no host", ErrInvalidURL)
	}
	u.RawQuery, u.Fragment = "", ""
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawPath = ""
	return u, nil
}

// URL is the API's base URL, without user or password.
func (m *Management) URL() string { return m.base.String() }

// VHost is the virtual host the client's policies are set in.
func (m *Management) VHost() string { return m.vhost }

// SetPolicy creates p in the client's virtual host, or replaces the policy
// of its name. Nothing answering is an error matching
// ErrManagementUnavailable; an answer refusing it (a user without the
// policymaker tag, a pattern RabbitMQ cannot compile) is a
// *ManagementError.
func (m *Management) SetPolicy(ctx context.Context, p Policy) error {
	if p.Name == "" {
		return fmt.Errorf("%w: a policy needs a name", ErrInvalidConfig)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("set policy %q: %w", p.Name, err)
	}
	// Each segment escaped, the default virtual host "/" as %2F.
	target := m.URL() + "api/policies/" + url.PathEscape(m.vhost) + "/" + url.PathEscape(p.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("set policy %q: %w", p.Name, err)
	}
	req.SetBasicAuth(m.user, m.password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.client.Do(req)
	if err != nil {
		err = unwrapURLError(err)
		if unanswered(err) {
			return fmt.Errorf("set policy %q through %s: %w: %w", p.Name, m.URL(), ErrManagementUnavailable, err)
		}
		return fmt.Errorf("set policy %q through %s: %w", p.Name, m.URL(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return &ManagementError{URL: m.URL(), Status: resp.StatusCode, Reason: managementReason(resp.Body)}
}

// unwrapURLError drops the *url.Error of net/url and net/http, which
// quotes the whole URL (a password too) and, from net/http, the method: the
// caller's message names what it was doing without them.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// unanswered reports whether err says that nothing answered: no listener,
// no such host, no answer in time. A TLS handshake that failed, or a
// connection dropped after it was made, was an answer.
func unanswered(err error) bool {
	var (
		op  *net.OpError
		dns *net.DNSError
		ne  net.Error
	)
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns) || errors.As(err, &ne) && ne.Timeout()
}

// managementReason is what the API said in the body of a refusal: its
// JSON reason when it sent one, else the start of the body.
func managementReason(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 4096))
	var v struct{ Error, Reason string }
	if json.Unmarshal(b, &v) != nil {
		return strings.TrimSpace(string(b))
	}
	var said []string
	for _, part := range []string{v.Error, v.Reason} {
		if part != "" {
			said = append(said, part)
		}
	}
	return strings.Join(said, ": ")
}

// ManagementError is an answer of the management API refusing a request.
type ManagementError struct {
	// URL is the API's base URL.
	URL string
	// Status is the HTTP status: 401 for a wrong password or a user
	// without the tag the request needs, 400 for a definition RabbitMQ
	// refuses.
	Status int
	// Reason is what the API said.
	Reason string
}

// Error names the API, the status and the reason.
func (e *ManagementError) Error() string {
	msg := fmt.Sprintf("rabbitmq: the management API at %s answered %d %s", e.URL, e.Status, http.StatusText(e.Status))
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}
