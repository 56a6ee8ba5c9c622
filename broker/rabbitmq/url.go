package rabbitmq

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrInvalidURL is what every URL error from Dial matches with errors.Is.
var ErrInvalidURL = errors.New("rabbitmq: invalid URL")

// defaultPorts are the ports a node without one is reached on.
var defaultPorts = map[string]string{"amqp": "5672", "amqps": "5671"}

// brokerURL is a parsed amqp:// or amqps:// URL naming one node or a
// comma-separated list of them (amqp://user:pass@a:5672,b:5672/vhost), that
// knows its secret, so that what it prints never contains the password.
type brokerURL struct {
	scheme string
	nodes  []nodeURL
	// redacted is the URL with every node, without the password and the
	// query (which may name key files).
	redacted string
	password string
	query    url.Values
}

// nodeURL is one node of a brokerURL.
type nodeURL struct {
	// raw is the node's own URL, password and query included, as amqp091
	// reads it.
	raw string
	// addr is host:port, with the scheme's default port when none was
	// given: how the node is named in logs, errors and metrics.
	addr string
	// host is the host without the port: TLS's default server name.
	host string
	// redacted is the node's URL without password and query.
	redacted string
}

// parseURL checks raw before amqp091 sees it: url.Parse and amqp091 both
// quote the whole URL, password included, in their errors, and neither
// reads a list of nodes.
func parseURL(raw string) (brokerURL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		// Not scheme://authority: url.Parse says what it is instead.
		return brokerURL{}, parseNode(raw)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hosts := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hosts = authority[:at+1], authority[at+1:]
	}
	b := brokerURL{scheme: scheme}
	seen := map[string]bool{}
	for i, host := range strings.Split(hosts, ",") {
		nodeRaw := scheme + "://" + userinfo + host + tail
		u, err := parseOne(nodeRaw)
		if err != nil {
			return brokerURL{}, err
		}
		if host == "" || u.Host == "" {
			if strings.Contains(hosts, ",") {
				return brokerURL{}, fmt.Errorf("%w: node %d of the list %q is empty", ErrInvalidURL, i+1, hosts)
			}
			return brokerURL{}, fmt.Errorf("%w: no host", ErrInvalidURL)
		}
		port := u.Port()
		if port == "" {
			port = defaultPorts[u.Scheme]
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return brokerURL{}, fmt.Errorf("%w: node %q: port %s is not between 1 and 65535", ErrInvalidURL, host, port)
		}
		addr := net.JoinHostPort(u.Hostname(), port)
		if seen[addr] {
			return brokerURL{}, fmt.Errorf("%w: node %s is listed twice", ErrInvalidURL, addr)
		}
		seen[addr] = true
		if i == 0 {
			b.password, _ = u.User.Password()
			b.query = u.Query()
			shown := url.URL{Scheme: u.Scheme, Host: hosts, Path: u.Path, RawPath: u.RawPath}
			if u.User != nil {
				shown.User = url.User(u.User.Username())
			}
			b.redacted = shown.String()
		}
		shown := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
		if u.User != nil {
			shown.User = url.User(u.User.Username())
		}
		b.nodes = append(b.nodes, nodeURL{raw: nodeRaw, addr: addr, host: u.Hostname(), redacted: shown.String()})
	}
	if strings.ContainsAny(raw, " \t\n") {
		return brokerURL{}, fmt.Errorf("%w: contains whitespace", ErrInvalidURL)
	}
	return b, nil
}

// parseNode reports what is wrong with a URL that has no scheme://.
func parseNode(raw string) error {
	if _, err := parseOne(raw); err != nil {
		return err
	}
	return fmt.Errorf("%w: no host", ErrInvalidURL)
}

// parseOne parses the URL of one node, refusing any scheme but amqp and
// amqps, without repeating the URL in its errors.
func parseOne(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v (a password with reserved characters must be percent-encoded)", ErrInvalidURL, unwrapURLError(err))
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return nil, fmt.Errorf("%w: scheme %q, want amqp or amqps", ErrInvalidURL, u.Scheme)
	}
	return u, nil
}

// addrs returns the address of every node, in the order they are tried.
func (b brokerURL) addrs() []string {
	out := make([]string, len(b.nodes))
	for i, n := range b.nodes {
		out[i] = n.addr
	}
	return out
}

// scrub returns err with every occurrence of the password replaced, for
// errors that come back from amqp091 or the network.
func (b brokerURL) scrub(err error) error {
	if err == nil || b.password == "" || !strings.Contains(err.Error(), b.password) {
		return err
	}
	return &scrubbedError{msg: strings.ReplaceAll(err.Error(), b.password, "xxxxx"), err: err}
}

// scrubbedError keeps the original error reachable for errors.Is and
// errors.As while printing a message without the password.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
