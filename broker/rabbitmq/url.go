package rabbitmq

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrInvalidURL is what every URL error from Dial matches with errors.Is.
var ErrInvalidURL = errors.New("rabbitmq: invalid URL")

// brokerURL is a parsed amqp:// or amqps:// URL that knows its secret, so
// that what it prints never contains the password.
type brokerURL struct {
	raw      string
	redacted string
	password string
}

// parseURL checks raw before amqp091 sees it: url.Parse and amqp091 both
// quote the whole URL, password included, in their errors.
func parseURL(raw string) (brokerURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return brokerURL{}, fmt.Errorf("%w: %v (a password with reserved characters must be percent-encoded)", ErrInvalidURL, err)
	}
	pw, _ := u.User.Password()
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return brokerURL{}, fmt.Errorf("%w: scheme %q, want amqp or amqps", ErrInvalidURL, u.Scheme)
	}
	if u.Host == "" {
		return brokerURL{}, fmt.Errorf("%w: no host", ErrInvalidURL)
	}
	if strings.ContainsAny(raw, " \t\n") {
		return brokerURL{}, fmt.Errorf("%w: contains whitespace", ErrInvalidURL)
	}
	shown := *u
	if u.User != nil {
		shown.User = url.User(u.User.Username())
	}
	return brokerURL{raw: raw, redacted: shown.String(), password: pw}, nil
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
