package engine_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
)

type card struct {
	Number string `json:"number" acemq:"secret"`
	Expiry string `json:"expiry"`
}

type Address struct {
	Street string `json:"street"`
	Phone  string `acemq:"secret"`
}

type secretOrder struct {
	ID    string          `json:"id"`
	Card  card            `json:"card"`
	Items []card          `json:"items"`
	Meta  map[string]card `json:"meta,omitempty"`
	Next  *secretOrder    `json:"next,omitempty"`
	Token string          `json:"-" acemq:"secret"`
	Address
}

type charged struct {
	secretOrder
	Receipt string `json:"receipt" acemq:"secret"`
}

// TestSecretsOfAFlow: a flow's secrets are its dsl.Secret paths and the
// fields its payload types tag, through structs, slices, maps, pointers
// and embedded structs, in what every step takes and returns; flows show
// lists them.
func TestSecretsOfAFlow(t *testing.T) {
	t.Parallel()
	def := dsl.Flow("secrets",
		dsl.Step("charge", func(_ context.Context, o secretOrder) (charged, error) { return charged{secretOrder: o}, nil }),
		dsl.Step("ship", func(_ context.Context, c charged) (charged, error) { return c, nil }),
		dsl.Secret("payload.note", "cvv"),
	)
	require.NoError(t, def.Err())
	want := []string{"cvv", "payload.**.Phone", "payload.**.card.number", "payload.**.items.number", "payload.**.meta.*.number",
		"payload.Phone", "payload.card.number", "payload.items.number", "payload.meta.*.number", "payload.note", "payload.receipt"}
	require.Equal(t, want, engine.Secrets(def))

	conn, err := broker.Open(context.Background(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	defer eng.Close(context.Background())
	require.NoError(t, eng.Register(def))
	fi, err := eng.Flow("secrets")
	require.NoError(t, err)
	require.Equal(t, want, fi.Secrets)
	require.Empty(t, engine.Secrets(dsl.Flow("plain", dsl.Step("a", same))))
}

// TestRedact: the values at the secret paths are masked, whatever their
// type, through arrays and at any depth for a bare name; everything else
// keeps its value and its keys' order; the payload given is not changed.
func TestRedact(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"id":"o-1","card":{"number":"4242 4242 4242 4242","expiry":"12/29"},` +
		`"items":[{"number":"4000-0000-0000-0002"},{"number":12345678901234}],"note":{"x":1},` +
		`"deep":{"cvv":"123","list":[{"cvv":true}]},"html":"<b>&</b>","nil":null,"pin":null}`)
	before := string(raw)
	got := engine.Redact(raw, []string{"payload.card.number", "payload.items.number", "payload.note", "cvv", "payload.pin"})
	require.JSONEq(t, `{"id":"o-1","card":{"number":"•••• 4242","expiry":"12/29"},`+
		`"items":[{"number":"•••• 0002"},{"number":"•••• 1234"}],"note":"••••",`+
		`"deep":{"cvv":"••••","list":[{"cvv":"••••"}]},"html":"<b>&</b>","nil":null,"pin":null}`, string(got))
	require.Contains(t, string(got), `"html":"<b>&</b>"`, "no HTML escaping added")
	require.Regexp(t, `^\{"id":"o-1","card":\{"number"`, string(got), "keys in their order")
	require.Equal(t, before, string(raw), "the payload itself is not changed")

	require.JSONEq(t, `{"card":"••••","next":{"x":1,"next":{"card":"••••","c":[{"card":"••••"}]}}}`,
		string(engine.Redact(json.RawMessage(`{"card":"a","next":{"x":1,"next":{"card":"b","c":[{"card":"c"}]}}}`), []string{"payload.**.card"})), "** is any depth, none too")
	require.JSONEq(t, `{"a":{"b":"••••"},"c":{"b":"••••"}}`, string(engine.Redact(json.RawMessage(`{"a":{"b":"x"},"c":{"b":"y"}}`), []string{"payload.*.b"})))
	require.Equal(t, `"••••"`, string(engine.Redact(json.RawMessage(`{"a":1}`), []string{"payload"})), "the whole payload")
	require.Equal(t, `{"a":1}`, string(engine.Redact(json.RawMessage(`{"a":1}`), nil)), "no secrets: as it is")
	require.Equal(t, `not json`, string(engine.Redact(json.RawMessage(`not json`), nil)))
	require.Equal(t, `"••••"`, string(engine.Redact(json.RawMessage(`not json`), []string{"cvv"})), "not JSON, with secrets: hidden")
	require.Equal(t, `"••••"`, string(engine.Redact(json.RawMessage(`{"a":1} {"b":2}`), []string{"cvv"})), "two documents: hidden")

	for in, want := range map[string]string{"4242 4242 4242 4242": "•••• 4242", "4242424242424242": "•••• 4242",
		"123": "••••", "hunter2-hunter2-hunter2": "••••", "12-34": "••••", "": "••••", "123456789012": "•••• 9012"} {
		require.Equal(t, want, engine.Mask(in), "%q", in)
	}
}
