package patterns_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// claimCheckStores runs f with each built-in store.
func claimCheckStores(t *testing.T, f func(t *testing.T, s patterns.ClaimCheckStore)) {
	t.Run("memory", func(t *testing.T) { t.Parallel(); f(t, patterns.NewInMemoryClaimCheckStore()) })
	t.Run("filesystem", func(t *testing.T) {
		t.Parallel()
		s, err := patterns.NewFilesystemClaimCheckStore(t.TempDir())
		require.NoError(t, err)
		f(t, s)
	})
}

func TestClaimCheckFraming(t *testing.T) {
	t.Parallel()
	claimCheckStores(t, func(t *testing.T, store patterns.ClaimCheckStore) {
		codec, err := patterns.NewClaimCheckCodec(broker.Raw, store, patterns.ClaimCheckThreshold(8))
		require.NoError(t, err)
		require.Equal(t, broker.ContentTypeBytes, codec.ContentType(), "the delegate's content type, unchanged")

		inline, err := codec.Encode([]byte("1234567"))
		require.NoError(t, err)
		require.Equal(t, []byte{0xAC, 0x01, 0x00, '1', '2', '3', '4', '5', '6', '7'}, inline, "below the threshold: inline")
		_, claimed := patterns.ClaimCheckKeyOf(inline)
		require.False(t, claimed)

		body, err := codec.Encode([]byte("12345678"))
		require.NoError(t, err)
		require.Equal(t, []byte{0xAC, 0x01, 0x01}, body[:3], "at the threshold: a claim check")
		key, ok := patterns.ClaimCheckKeyOf(body)
		require.True(t, ok)
		require.Equal(t, key, string(body[3:]), "the key follows as bare UTF-8")
		stored, ok, err := store.Get(context.Background(), key)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []byte("12345678"), stored, "the store holds the delegate's bytes")

		var got []byte
		require.NoError(t, codec.Check(body))
		require.NoError(t, codec.Decode(body, &got))
		require.Equal(t, []byte("12345678"), got)
		require.NoError(t, codec.Decode(inline, &got))
		require.Equal(t, []byte("1234567"), got)
		require.NoError(t, codec.Decode([]byte("unframed"), &got), "a body without the frame is read as the delegate would")
		require.Equal(t, []byte("unframed"), got)
	})
}

func TestClaimCheckDefaultThreshold(t *testing.T) {
	t.Parallel()
	store := patterns.NewInMemoryClaimCheckStore()
	codec, err := patterns.NewClaimCheckCodec(broker.Raw, store)
	require.NoError(t, err)
	below, err := codec.Encode(make([]byte, patterns.DefaultClaimCheckThreshold-1))
	require.NoError(t, err)
	require.Equal(t, byte(0x00), below[2])
	at, err := codec.Encode(make([]byte, 65536))
	require.NoError(t, err)
	require.Equal(t, byte(0x01), at[2], "65536 bytes is offloaded")
	require.Equal(t, 1, store.Len())

	everything, err := patterns.NewClaimCheckCodec(broker.JSON, store, patterns.ClaimCheckThreshold(0))
	require.NoError(t, err)
	small, err := everything.Encode(map[string]int{"n": 1})
	require.NoError(t, err)
	require.Equal(t, byte(0x01), small[2], "threshold 0 offloads everything")
	require.Equal(t, broker.ContentTypeJSON, everything.ContentType())
}

func TestClaimCheckMissingKeyIsDecodeError(t *testing.T) {
	t.Parallel()
	claimCheckStores(t, func(t *testing.T, store patterns.ClaimCheckStore) {
		codec, err := patterns.NewClaimCheckCodec(broker.JSON, store, patterns.ClaimCheckThreshold(0))
		require.NoError(t, err)
		body, err := codec.Encode(map[string]string{"doc": "x"})
		require.NoError(t, err)
		key, _ := patterns.ClaimCheckKeyOf(body)
		require.NoError(t, store.Delete(context.Background(), key))
		require.NoError(t, store.Delete(context.Background(), key), "deleting what is gone is not an error")

		var v map[string]string
		err = codec.Decode(body, &v)
		var de *broker.DecodeError
		require.ErrorAs(t, err, &de)
		require.Contains(t, err.Error(), "retention expired")
		require.Contains(t, err.Error(), key)
	})
}

// TestClaimCheckKeys pins docs/wire.md, "Claim check": a key is an opaque
// string of 1-200 bytes from [A-Za-z0-9._-], not starting with a dot, so
// that stores of other languages, issuing keys of other forms, can share a
// directory; anything else is refused as fatal before it comes near a path,
// whether a store is asked for it or a message names it.
func TestClaimCheckKeys(t *testing.T) {
	t.Parallel()
	keys := []struct {
		key string
		ok  bool
	}{
		{"0b9f3c1e-4d7a-4c2b-9a8e-1f2d3c4b5a69", true}, // what the built-in stores issue
		{"0B9F3C1E-4D7A-4C2B-9A8E-1F2D3C4B5A69", true}, // another store's UUIDs
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", true},           // a ULID
		{"order-42_v2.bin", true},
		{"a", true},
		{"a..b", true},
		{"key.", true},
		{strings.Repeat("k", 200), true},
		{"", false},
		{strings.Repeat("k", 201), false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{".claim-123.tmp", false}, // a file store's own temporary file
		{"../../etc/passwd", false},
		{"/etc/passwd", false},
		{"a/b", false},
		{"a/../../b", false},
		{`a\b`, false},
		{"C:key", false},
		{"a b", false},
		{"a\x00b", false},
		{"clé", false},
		{"~root", false},
	}
	claimCheckStores(t, func(t *testing.T, store patterns.ClaimCheckStore) {
		ctx := context.Background()
		codec, err := patterns.NewClaimCheckCodec(broker.Raw, store)
		require.NoError(t, err)
		for _, tc := range keys {
			frame := append([]byte{0xAC, 0x01, 0x01}, tc.key...)
			_, found, err := store.Get(ctx, tc.key)
			derr := store.Delete(ctx, tc.key)
			var got []byte
			cerr := codec.Decode(frame, &got)
			if tc.ok {
				require.NoError(t, err, "key %q", tc.key)
				require.False(t, found, "key %q", tc.key)
				require.NoError(t, derr, "key %q", tc.key)
				var de *broker.DecodeError
				require.ErrorAs(t, cerr, &de, "key %q: a valid key with nothing under it", tc.key)
				continue
			}
			var fe *broker.FatalError
			require.ErrorAs(t, err, &fe, "key %q", tc.key)
			require.ErrorIs(t, err, patterns.ErrInvalidClaimCheckKey, "key %q", tc.key)
			require.ErrorAs(t, derr, &fe, "key %q", tc.key)
			if tc.key != "" {
				require.ErrorAs(t, cerr, &fe, "key %q: a key from a message is checked before it becomes a path", tc.key)
				require.Nil(t, got)
			}
		}
	})
}

// TestFilesystemClaimCheckStoreSharesADirectory: a payload another
// language's store left at <root>/<key>, under a key of its own form, is
// read back through a frame naming that key.
func TestFilesystemClaimCheckStoreSharesADirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const key = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	require.NoError(t, os.WriteFile(filepath.Join(dir, key), []byte("written elsewhere"), 0o600))
	store, err := patterns.NewFilesystemClaimCheckStore(dir)
	require.NoError(t, err)
	codec, err := patterns.NewClaimCheckCodec(broker.Raw, store)
	require.NoError(t, err)
	var got []byte
	require.NoError(t, codec.Decode(append([]byte{0xAC, 0x01, 0x01}, key...), &got))
	require.Equal(t, "written elsewhere", string(got))
	require.NoError(t, store.Delete(context.Background(), key))
	_, err = os.Stat(filepath.Join(dir, key))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestFilesystemClaimCheckStoreLeavesNoTemporaryFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := patterns.NewFilesystemClaimCheckStore(dir)
	require.NoError(t, err)
	key, err := store.Put(context.Background(), []byte("payload"))
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, key, entries[0].Name(), "written under a temporary name and renamed into place")
	b, err := os.ReadFile(filepath.Join(dir, key))
	require.NoError(t, err)
	require.Equal(t, "payload", string(b))
}

func TestClaimCheckRefusals(t *testing.T) {
	t.Parallel()
	_, err := patterns.NewClaimCheckCodec(nil, patterns.NewInMemoryClaimCheckStore())
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.NewClaimCheckCodec(broker.JSON, nil)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.NewClaimCheckCodec(broker.JSON, patterns.NewInMemoryClaimCheckStore(), patterns.ClaimCheckThreshold(-1))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.NewFilesystemClaimCheckStore("")
	require.ErrorIs(t, err, broker.ErrInvalidOption)

	codec, err := patterns.NewClaimCheckCodec(broker.JSON, failingClaimCheckStore{})
	require.NoError(t, err)
	_, err = codec.Encode(strings.Repeat("x", patterns.DefaultClaimCheckThreshold))
	require.ErrorIs(t, err, errClaimCheckStoreDown, "a store failure is an error, and nothing is published")
	require.Error(t, codec.Check([]byte{0xAC, 0x01, 0x07, 'k'}), "an unknown marker")
	require.Error(t, codec.Check([]byte{0xAC, 0x01, 0x00, '{'}), "inline bytes pass the delegate's own check")
}

var errClaimCheckStoreDown = errors.New("store down")

type failingClaimCheckStore struct{}

func (failingClaimCheckStore) Put(context.Context, []byte) (string, error) {
	return "", errClaimCheckStoreDown
}
func (failingClaimCheckStore) Get(context.Context, string) ([]byte, bool, error) {
	return nil, false, errClaimCheckStoreDown
}
func (failingClaimCheckStore) Delete(context.Context, string) error { return errClaimCheckStoreDown }

// TestClaimCheckThroughRabbitMQ: a 1 MiB document leaves fewer than 100
// bytes on the broker, and a consumer reads the document back whole.
func TestClaimCheckThroughRabbitMQ(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		store, err := patterns.NewFilesystemClaimCheckStore(t.TempDir())
		require.NoError(t, err)
		codec, err := patterns.NewClaimCheckCodec(broker.JSON, store)
		require.NoError(t, err)
		conn := h.Open(broker.Config{Codec: codec})
		q := h.Queue("claimcheck")
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))

		doc := map[string]string{"scan": strings.Repeat("0123456789abcdef", 1<<16)} // 1 MiB of payload
		require.NoError(t, conn.Publish(ctx, doc, broker.To(q), broker.Mandatory()))

		var raw []byte
		require.Eventually(t, func() bool {
			d, err := h.Admin.Transport().Get(ctx, q)
			require.NoError(t, err)
			if d == nil {
				return false
			}
			raw = d.Body
			require.Equal(t, broker.ContentTypeJSON, d.ContentType)
			require.NoError(t, d.Nack(true))
			return true
		}, 10*time.Second, 20*time.Millisecond)
		require.Less(t, len(raw), 100, "what is on the broker is the frame and the key")
		require.True(t, bytes.HasPrefix(raw, []byte{0xAC, 0x01, 0x01}))

		got := make(chan map[string]string, 1)
		_, err = conn.Consume(ctx, q, broker.Func(func(_ context.Context, m *broker.Message) error {
			v, err := broker.Decode[map[string]string](m)
			if err != nil {
				return err
			}
			got <- v
			return nil
		}), broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		require.Equal(t, doc, brokertest.Next(t, got, 10*time.Second))
	})
}
