package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/dsl"
)

// Masked is what a secret value is shown as (Mask): the whole of it, or
// its first part before the last four digits of a card or account number.
const Masked = "••••"

// maskKeepAt is how long a number (digits, spaces and dashes) must be for
// Mask to keep its last four digits: a card number is, a PIN or a CVV is
// not.
const maskKeepAt = 12

// Secrets is the secret paths of def (see dsl.Secret for their form),
// sorted: those dsl.Secret gave, and those the SecretTag of its payload
// types marks, each a path from the payload's root by JSON names
// (payload.card, payload.items.card through a slice, payload.meta.*.pin
// through a map), found in what its first step (or its itinerary) takes
// and in what every step, a fork's branches' too, takes and returns. A
// path found in one step's type masks that path in every payload of the
// flow: a field is secret in the whole run. Under a type that contains
// itself (a tree), its secrets hold at any depth: payload.**.card.
func Secrets(def *dsl.FlowDef) []string {
	if def == nil {
		return nil
	}
	out := def.Secrets()
	add := func(t reflect.Type) { tagSecrets(t, dsl.SecretPathPrefix, map[reflect.Type]*bool{}, &out) }
	add(def.Input())
	var walk func([]dsl.StepSpec)
	walk = func(steps []dsl.StepSpec) {
		for _, s := range steps {
			add(s.In)
			add(s.Out)
			if s.Fork != nil {
				for _, b := range s.Fork.Branches {
					walk(b)
				}
			}
		}
	}
	walk(def.Steps())
	slices.Sort(out)
	return slices.Compact(out)
}

// tagSecrets adds to out the paths, under prefix, of the fields of t
// that SecretTag marks secret; seen holds the struct types being walked,
// each with whether it was met again inside itself, when its paths are
// added again with ** after prefix. A struct embedded without a JSON name
// has its fields at prefix, as encoding/json puts them; one marked secret
// has each of them secret.
func tagSecrets(t reflect.Type, prefix string, seen map[reflect.Type]*bool, out *[]string) {
	t = structOf(t, &prefix, seen)
	if t == nil {
		return
	}
	again, from := false, len(*out)
	seen[t] = &again
	defer func() {
		delete(seen, t)
		if again {
			for _, p := range slices.Clone((*out)[from:]) {
				*out = append(*out, prefix+".**"+strings.TrimPrefix(p, prefix))
			}
		}
	}()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		secret := slices.Contains(strings.Split(f.Tag.Get(dsl.SecretTag), ","), dsl.SecretTagValue)
		switch {
		case f.Anonymous && name == "" && secret:
			if et := structOf(f.Type, new(string), seen); et != nil {
				for j := range et.NumField() {
					if n := jsonName(et.Field(j)); n != "" {
						*out = append(*out, prefix+"."+n)
					}
				}
			}
		case f.Anonymous && name == "":
			tagSecrets(f.Type, prefix, seen, out)
		case secret:
			*out = append(*out, prefix+"."+jsonName(f))
		default:
			tagSecrets(f.Type, prefix+"."+jsonName(f), seen, out)
		}
	}
}

// structOf is the struct type t leads to through pointers, slices and
// arrays (an array is passed through) and maps (whose keys add "*" to
// *prefix), following them as tagSecrets does; nil for any other type and
// for a struct being walked already, which is marked met again.
func structOf(t reflect.Type, prefix *string, seen map[reflect.Type]*bool) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			t = t.Elem()
		case reflect.Map:
			*prefix += ".*"
			t = t.Elem()
		case reflect.Struct:
			if again, ok := seen[t]; ok {
				*again = true
				return nil
			}
			return t
		default:
			return nil
		}
	}
	return nil
}

// jsonName is the name encoding/json gives field f ("" when it leaves
// it out).
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case name == "-" || !f.IsExported():
		return ""
	case name == "":
		return f.Name
	}
	return name
}

// Mask is a secret value as a person is shown it: Masked, followed by the
// last four digits when s is a card or account number (at least twelve
// digits, spaces and dashes, nothing else): "•••• 4242".
func Mask(s string) string {
	digits := 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == ' ' || r == '-':
		default:
			return Masked
		}
	}
	if utf8.RuneCountInString(s) < maskKeepAt || digits < 4 {
		return Masked
	}
	var last []rune
	for _, r := range slices.Backward([]rune(s)) {
		if unicode.IsDigit(r) {
			last = append([]rune{r}, last...)
			if len(last) == 4 {
				break
			}
		}
	}
	return Masked + " " + string(last)
}

// Redact is raw, a payload as the journal keeps it, with the values at
// secrets (the paths of Secrets, FlowInfo.Secrets) masked: a string or a
// number becomes the JSON string Mask makes of it, an object, an array or
// a boolean the string Masked; a null stays null (it tells nothing).
// Everything else is as it was, keys in their order, though re-encoded
// (compact) when anything is masked. Without secrets raw is returned as it
// is; a payload that is not JSON (a flow of another codec) cannot be
// walked and becomes the JSON string Masked whole when the flow has
// secrets. Redact never changes raw itself.
func Redact(raw json.RawMessage, secrets []string) json.RawMessage {
	if len(secrets) == 0 || len(raw) == 0 {
		return raw
	}
	s := compileSecrets(secrets)
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := s.value(dec, &out, expand(s.paths)); err != nil {
		return quote(Masked)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return quote(Masked)
	}
	return out.Bytes()
}

// Redact is Redact of raw, a payload of the flow fi describes, by its
// Secrets.
func (fi FlowInfo) Redact(raw json.RawMessage) json.RawMessage { return Redact(raw, fi.Secrets) }

// secretSet is secret paths ready to walk a payload by: paths the
// segments after "payload", names the bare names.
type secretSet struct {
	paths [][]string
	names map[string]bool
}

func compileSecrets(secrets []string) secretSet {
	s := secretSet{names: map[string]bool{}}
	for _, p := range secrets {
		segs := strings.Split(p, ".")
		if segs[0] != dsl.SecretPathPrefix {
			s.names[p] = true
			continue
		}
		s.paths = append(s.paths, segs[1:])
	}
	return s
}

// value copies the next JSON value of dec to out, masked when one of
// active, the rests of the paths that reached it (expanded), is done.
func (s secretSet) value(dec *json.Decoder, out *bytes.Buffer, active [][]string) error {
	if slices.ContainsFunc(active, func(p []string) bool { return len(p) == 0 }) {
		var v any
		if err := dec.Decode(&v); err != nil {
			return err
		}
		out.Write(maskValue(v))
		return nil
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out.WriteByte('{')
			for first := true; dec.More(); first = false {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				if !first {
					out.WriteByte(',')
				}
				out.Write(quote(key))
				out.WriteByte(':')
				if err := s.value(dec, out, s.next(active, key)); err != nil {
					return err
				}
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			for first := true; dec.More(); first = false {
				if !first {
					out.WriteByte(',')
				}
				// An array is passed through: its items are where it is.
				if err := s.value(dec, out, active); err != nil {
					return err
				}
			}
			out.WriteByte(']')
		}
		_, err := dec.Token() // the closing delimiter
		return err
	case string:
		out.Write(quote(t))
	case json.Number:
		out.WriteString(t.String())
	case bool:
		out.WriteString(map[bool]string{true: "true", false: "false"}[t])
	case nil:
		out.WriteString("null")
	}
	return nil
}

// next is the rests of active that go on into the field key, with an
// empty one when key is a secret name.
func (s secretSet) next(active [][]string, key string) [][]string {
	var out [][]string
	for _, p := range active {
		switch {
		case len(p) == 0:
		case p[0] == "**":
			out = append(out, p)
		case p[0] == key || p[0] == "*":
			out = append(out, p[1:])
		}
	}
	if s.names[key] {
		out = append(out, nil)
	}
	return expand(out)
}

// expand adds to paths, for each that starts with **, its rest: ** stands
// for no key too.
func expand(paths [][]string) [][]string {
	for i := 0; i < len(paths); i++ {
		if p := paths[i]; len(p) > 0 && p[0] == "**" {
			paths = append(paths, p[1:])
		}
	}
	return paths
}

// maskValue is the JSON of a secret value v as shown.
func maskValue(v any) []byte {
	switch v := v.(type) {
	case nil:
		return []byte("null")
	case string:
		return quote(Mask(v))
	case json.Number:
		return quote(Mask(v.String()))
	default:
		return quote(Masked)
	}
}

// quote is s as a JSON string, with <, > and & as they are (a page
// escapes them when it shows the payload).
func quote(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
