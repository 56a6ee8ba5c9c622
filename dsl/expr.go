package dsl

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
)

// Expr is an expr-lang expression over a payload, compiled when the flow
// was built against the payload's type. The payload is named payload and
// its fields are read by their JSON names.
type Expr struct {
	src     string
	program *vm.Program
	// view is the type the payload is decoded into for evaluation: the
	// payload's own type with its fields renamed to their JSON names.
	view reflect.Type
}

// String is the expression's source.
func (e *Expr) String() string { return e.src }

// exprKind is what an expression must produce.
type exprKind int

const (
	exprBool exprKind = iota
	exprTime
	exprString
	exprList
)

// compileExpr compiles src against payloads of type t (nil: there is no
// payload) and the names of vars beside it, each typed as its value.
func compileExpr(src string, t reflect.Type, kind exprKind, vars ...map[string]any) (*Expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	env := map[string]any{}
	for _, v := range vars {
		maps.Copy(env, v)
	}
	var view reflect.Type
	if t != nil {
		view = jsonView(t)
		env["payload"] = reflect.Zero(view).Interface()
	}
	p, err := expr.Compile(src, expr.Env(env))
	if err != nil {
		return nil, exprError(src, t, view, err)
	}
	// Checked here rather than by expr.AsBool, whose error has no column.
	if out := p.Node().Type(); out != nil && !exprResultFits(out, kind) {
		want := "a time (time.Time or an RFC 3339 string)"
		switch kind {
		case exprBool:
			want = "a bool"
		case exprString:
			want = "a string or a number"
		case exprList:
			want = "a list"
		}
		return nil, fmt.Errorf("%q gives %s, want %s (column %d)", src, out, want, p.Node().Location().From+1)
	}
	return &Expr{src: src, program: p, view: view}, nil
}

// Condition compiles src as a condition outside a flow, as When is
// compiled within one: over a payload of type payload read by its JSON
// names (nil: no payload), and over vars, each name typed as the value it
// maps to (a struct's fields are read by their expr tags). A name or a
// field that is not there, or a result that is not a bool, is an error
// giving its column.
func Condition(src string, payload reflect.Type, vars map[string]any) (*Expr, error) {
	return compileExpr(src, payload, exprBool, vars)
}

// exprResultFits says whether a result of static type out can be read as
// kind; interface types are decided at run time.
func exprResultFits(out reflect.Type, kind exprKind) bool {
	if out.Kind() == reflect.Interface {
		return true
	}
	switch kind {
	case exprBool:
		return out.Kind() == reflect.Bool
	case exprTime:
		return out == reflect.TypeOf(time.Time{}) || out.Kind() == reflect.String
	case exprList:
		return out.Kind() == reflect.Slice || out.Kind() == reflect.Array
	case exprString:
		switch out.Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			return true
		}
		return false
	}
	return true
}

// exprError says where src is wrong, naming the payload's own type rather
// than the JSON view compiled in its place.
func exprError(src string, t, view reflect.Type, err error) error {
	msg := err.Error()
	var fe *file.Error
	if errors.As(err, &fe) {
		msg = fmt.Sprintf("%s (column %d)", fe.Message, fe.Column+1)
	}
	if view != t {
		msg = strings.ReplaceAll(msg, view.String(), t.String())
	}
	return fmt.Errorf("%q: %s", src, msg)
}

// eval runs the expression on a payload: a Go value, read through its
// JSON form, or a json.RawMessage already in that form; and on vars.
func (e *Expr) eval(payload any, vars ...map[string]any) (any, error) {
	env := map[string]any{}
	for _, v := range vars {
		maps.Copy(env, v)
	}
	if e.view != nil {
		raw, ok := payload.(json.RawMessage)
		if !ok {
			b, err := json.Marshal(payload)
			if err != nil {
				return nil, fmt.Errorf("expression %q: encode the payload: %w", e.src, err)
			}
			raw = b
		}
		v := reflect.New(e.view)
		if len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, v.Interface()); err != nil {
				return nil, fmt.Errorf("expression %q: read the payload: %w", e.src, err)
			}
		}
		env["payload"] = v.Elem().Interface()
	}
	out, err := expr.Run(e.program, env)
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", e.src, err)
	}
	return out, nil
}

// Bool evaluates a condition (When) on a payload.
func (e *Expr) Bool(payload any) (bool, error) { return e.BoolWith(payload, nil) }

// BoolWith evaluates a Condition on a payload (as Bool reads it) and on
// vars, whose values must have the types it was compiled with. It refuses
// a payload that does not decode into the payload's type.
func (e *Expr) BoolWith(payload any, vars map[string]any) (bool, error) {
	out, err := e.eval(payload, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("expression %q gave %T, want a bool", e.src, out)
	}
	return b, nil
}

// Time evaluates a time (DelayUntil) on a payload: a time.Time, or a
// string in RFC 3339.
func (e *Expr) Time(payload any) (time.Time, error) {
	out, err := e.eval(payload)
	if err != nil {
		return time.Time{}, err
	}
	switch t := out.(type) {
	case time.Time:
		return t, nil
	case string:
		at, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return time.Time{}, fmt.Errorf("expression %q gave %q, not an RFC 3339 time: %w", e.src, t, err)
		}
		return at, nil
	default:
		return time.Time{}, fmt.Errorf("expression %q gave %T, want a time", e.src, out)
	}
}

// Key evaluates an ordering key (OrderedBy) on a payload; nil is the empty
// key, which orders against nothing.
func (e *Expr) Key(payload any) (string, error) {
	out, err := e.eval(payload)
	if err != nil {
		return "", err
	}
	if out == nil {
		return "", nil
	}
	return fmt.Sprint(out), nil
}

var (
	viewsMu sync.Mutex
	views   = map[reflect.Type]reflect.Type{}
)

// jsonView is t with every struct field renamed, through an `expr` tag, to
// its JSON name, and the fields JSON leaves out left out: the type an
// expression is compiled against so that payload.ship_at means what the
// payload's JSON calls ship_at. The json tags are kept, so a JSON payload
// decodes into the view as it would into t. A type with no structs in it
// is its own view.
func jsonView(t reflect.Type) reflect.Type {
	viewsMu.Lock()
	defer viewsMu.Unlock()
	return viewOf(t, map[reflect.Type]bool{})
}

func viewOf(t reflect.Type, visiting map[reflect.Type]bool) reflect.Type {
	if v, ok := views[t]; ok {
		return v
	}
	if visiting[t] {
		// A recursive type: reflect cannot build a recursive struct, so
		// the inner level is read as an untyped value.
		return reflect.TypeOf((*any)(nil)).Elem()
	}
	visiting[t] = true
	defer delete(visiting, t)
	var v reflect.Type
	switch t.Kind() {
	case reflect.Pointer:
		v = reflect.PointerTo(viewOf(t.Elem(), visiting))
	case reflect.Slice:
		v = reflect.SliceOf(viewOf(t.Elem(), visiting))
	case reflect.Array:
		v = reflect.ArrayOf(t.Len(), viewOf(t.Elem(), visiting))
	case reflect.Map:
		v = reflect.MapOf(t.Key(), viewOf(t.Elem(), visiting))
	case reflect.Struct:
		if t == reflect.TypeOf(time.Time{}) || implementsJSON(t) {
			v = t
			break
		}
		fields := viewFields(t, visiting)
		if fields == nil {
			v = t
			break
		}
		v = reflect.StructOf(fields)
	default:
		v = t
	}
	views[t] = v
	return v
}

func implementsJSON(t reflect.Type) bool {
	u := reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	return t.Implements(u) || reflect.PointerTo(t).Implements(u)
}

// viewFields lists t's fields as JSON sees them, embedded structs flattened.
func viewFields(t reflect.Type, visiting map[reflect.Type]bool) []reflect.StructField {
	var out []reflect.StructField
	seen := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if name == "-" && tag == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if seen[name] || !validExprName(name) {
				continue
			}
			seen[name] = true
			jsonTag := name
			if _, opts, ok := strings.Cut(tag, ","); ok {
				jsonTag += "," + opts
			}
			out = append(out, reflect.StructField{
				Name: "F" + fmt.Sprint(len(out)),
				Type: viewOf(f.Type, visiting),
				Tag:  reflect.StructTag(fmt.Sprintf(`json:%q expr:%q`, jsonTag, name)),
			})
		}
	}
	walk(t)
	return out
}

// validExprName: a JSON name expr can read as payload.name.
func validExprName(s string) bool {
	for i, r := range s {
		if r != '_' && !(r >= 'a' && r <= 'z') && !(r >= 'A' && r <= 'Z') && !(i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}
