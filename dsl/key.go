package dsl

import "errors"

// keyPart is a flow's Key.
type keyPart struct{ src string }

func (*keyPart) part() {}

// Key names the flow's business key: an expression over the run's input
// (payload, read by its JSON names, as When reads it) giving a string or
// a number, evaluated when a run starts and kept in the journal with the
// run, which runs list --key (and key == "..." in --where) then finds it
// by. It is compiled against the flow's input type when the flow is
// built; an empty expression, a second Key or one that does not give a
// string or a number is refused then. A run whose key does not evaluate
// (a nil field) is started with no key.
func Key(expr string) Part { return &keyPart{src: expr} }

// setKey compiles p as f's business key.
func (f *FlowDef) setKey(p *keyPart) error {
	if f.keySrc != "" {
		return errors.New("Key twice")
	}
	if p.src == "" {
		return errors.New("Key with no expression")
	}
	f.keySrc = p.src
	return nil
}

// compileKey compiles the Key's expression against the flow's input,
// once its steps are known.
func (f *FlowDef) compileKey() error {
	if f.keySrc == "" {
		return nil
	}
	k, err := compileExpr(f.keySrc, f.Input(), exprString)
	if err != nil {
		return f.fail("", "Key %w", err)
	}
	f.key = k
	return nil
}

// BusinessKey is the flow's Key compiled, nil when it names none.
func (f *FlowDef) BusinessKey() *Expr { return f.key }
