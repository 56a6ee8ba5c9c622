package enginepg

import (
	"fmt"
	"net/url"
	"strings"
)

// redactor takes a connection's secrets out of error texts.
type redactor struct {
	// secrets are the password and the key's password (sslpassword).
	secrets []string
}

// errorf is fmt.Errorf with every secret replaced by xxxxx in the text;
// errors.Is and errors.As still see what it wraps.
func (r redactor) errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	msg := err.Error()
	for _, s := range r.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose text had a secret taken out.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// connSecrets are the password and sslpassword (which decrypts sslkey) of
// a connection string, URL or keyword/value form, as far as they can be
// read without parsing it as pgx does: pgx's own errors already hide the
// password, and these are taken out of whatever else an error says.
func connSecrets(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p)
		}
		if p := u.Query().Get("sslpassword"); p != "" {
			out = append(out, p)
		}
		return out
	}
	for _, kv := range strings.Fields(raw) {
		k, v, _ := strings.Cut(kv, "=")
		if (k == "password" || k == "sslpassword") && strings.Trim(v, "'") != "" {
			out = append(out, strings.Trim(v, "'"))
		}
	}
	return out
}
