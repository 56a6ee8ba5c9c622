package dsl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SecretTag is the struct tag that marks a field of a payload type as
// secret: `acemq:"secret"`. A flow's secrets are the fields so tagged in
// the types its steps take and return, and the paths given to Secret.
const SecretTag = "acemq"

// SecretTagValue is the value of SecretTag that marks a field secret.
const SecretTagValue = "secret"

// SecretPathPrefix starts a secret path from the payload's root, as
// expressions name the payload: payload.card.number.
const SecretPathPrefix = "payload"

// Secret marks payload fields of the flow as secret, for the fields its
// payload types cannot tag (a json.RawMessage payload, a type of another
// package). Each path is either
//
//   - payload.a.b: the field b of the object a at the payload's root, by
//     their JSON names; * stands for any one key, ** for any number of
//     them (none too), and an array is passed through (payload.items.card
//     is every item's card); payload alone is the whole payload;
//   - a bare name (cvv): every field of that name, at any depth.
//
// A secret is kept as it is (in messages and in the run journal, since a
// replay needs it) and shown masked by the dashboard, the command line's
// output and the logs (engine.Redact). Secret refuses no paths, an empty
// one, an empty segment (payload..b) and a bare name holding * .
func Secret(paths ...string) Part {
	if len(paths) == 0 {
		return &settingPart{err: errors.New("Secret with no paths")}
	}
	for _, p := range paths {
		if err := checkSecretPath(p); err != nil {
			return &settingPart{err: fmt.Errorf("Secret %q: %w", p, err)}
		}
	}
	paths = slices.Clone(paths)
	return &settingPart{apply: func(f *FlowDef) {
		for _, p := range paths {
			if !slices.Contains(f.secrets, p) {
				f.secrets = append(f.secrets, p)
			}
		}
	}}
}

// checkSecretPath refuses a path Secret cannot follow.
func checkSecretPath(p string) error {
	if strings.TrimSpace(p) != p || p == "" {
		return errors.New("want a path (payload.card.number) or a field name (cvv), without spaces around it")
	}
	segs := strings.Split(p, ".")
	if segs[0] != SecretPathPrefix {
		if len(segs) > 1 {
			return errors.New("a path starts with payload. (payload.card.number); a bare name has no dot")
		}
		if strings.Contains(p, "*") {
			return errors.New("a bare name matches a field of that name at any depth: it cannot hold *")
		}
		return nil
	}
	for _, s := range segs[1:] {
		if s == "" {
			return errors.New("an empty segment")
		}
		if strings.Contains(s, "*") && s != "*" && s != "**" {
			return fmt.Errorf("segment %q: * (any one key) and ** (any number of keys) stand alone", s)
		}
	}
	return nil
}

// Secrets is the paths Secret gave the flow, in the order given (a copy;
// those the payload types' SecretTag marks are not among them: see
// engine.Secrets).
func (f *FlowDef) Secrets() []string { return slices.Clone(f.secrets) }
