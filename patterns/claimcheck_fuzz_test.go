package patterns_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// claimKeyAllowed is the contract's key (docs/wire.md, Claim check)
// written out: 1-200 bytes of [A-Za-z0-9._-], not starting with a dot.
func claimKeyAllowed(key string) bool {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	return len(key) >= 1 && len(key) <= 200 && key[0] != '.' &&
		!strings.ContainsFunc(key, func(r rune) bool { return !strings.ContainsRune(alphabet, r) })
}

// FuzzClaimCheckFrame: whatever body arrives, the claim-check codec reads
// it without panicking, as the frame says: unframed and inline bodies are
// the delegate's bytes; a claim check's key is looked up only when the
// contract allows it (anything else is a *broker.FatalError wrapping
// ErrInvalidClaimCheckKey from both stores, an empty key a
// *broker.DecodeError), a key not held is a *broker.DecodeError, and a held
// one reads as what was stored; an unknown marker is a *broker.DecodeError,
// from Check too. Whatever the codec writes reads back, and a key it wrote
// is one the contract allows.
func FuzzClaimCheckFrame(f *testing.F) {
	dir := f.TempDir()
	const heldKey, held = "held-key_01.v2", "the stored payload"
	if err := os.WriteFile(filepath.Join(dir, heldKey), []byte(held), 0o600); err != nil {
		f.Fatal(err)
	}
	fsStore, err := patterns.NewFilesystemClaimCheckStore(dir)
	if err != nil {
		f.Fatal(err)
	}
	stores := map[string]patterns.ClaimCheckStore{"memory": patterns.NewInMemoryClaimCheckStore(), "filesystem": fsStore}
	claim := func(key string) []byte { return append([]byte{0xAC, 0x01, 0x01}, key...) }
	for _, body := range [][]byte{
		nil, {0xAC}, {0xAC, 0x01}, {0xAC, 0x01, 0x00}, {0xAC, 0x01, 0x02, 'x'}, {0xAC, 0x02, 0x01, 'k'}, {0x01, 0xAC, 0x01},
		append([]byte{0xAC, 0x01, 0x00}, `{"order":42}`...), []byte(`{"order":42}`),
		claim(heldKey), claim("01JDQ4Z8XKQ7V3M5N6P7R8S9T0"), claim("6f1c2b1e-8a8e-4c1f-9d2a-0b6c7e5f4a3d"),
		claim(""), claim("."), claim(".."), claim(".hidden"), claim("../../etc/passwd"), claim("/etc/passwd"),
		claim("a/b"), claim(`a\b`), claim("a b"), claim("é"), claim("a\x00b"), claim("\xff\xfe"), claim(strings.Repeat("k", 200)),
		claim(strings.Repeat("k", 201)), claim(heldKey + "\n"),
	} {
		f.Add(body, 16)
	}
	f.Add([]byte("small"), 0)
	f.Add(bytes.Repeat([]byte("x"), 100), 100)
	f.Fuzz(func(t *testing.T, body []byte, threshold int) {
		if len(body) > 512 {
			return
		}
		for name, store := range stores {
			codec, err := patterns.NewClaimCheckCodec(broker.Raw, store)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			derr, cerr := codec.Decode(body, &got), codec.Check(body)
			key, claimed := patterns.ClaimCheckKeyOf(body)
			var fatal *broker.FatalError
			var undecodable *broker.DecodeError
			switch {
			case len(body) < 3 || body[0] != 0xAC || body[1] != 0x01:
				if derr != nil || cerr != nil || !bytes.Equal(got, body) || claimed {
					t.Fatalf("%s: unframed %q read as %q (%v, check %v, claimed %v)", name, body, got, derr, cerr, claimed)
				}
			case body[2] == 0x00:
				if derr != nil || cerr != nil || !bytes.Equal(got, body[3:]) || claimed {
					t.Fatalf("%s: inline %q read as %q (%v, check %v, claimed %v)", name, body, got, derr, cerr, claimed)
				}
			case body[2] != 0x01:
				if !errors.As(derr, &undecodable) || !errors.As(cerr, &undecodable) || claimed {
					t.Fatalf("%s: unknown marker in %q: %v, check %v, claimed %v", name, body, derr, cerr, claimed)
				}
			case !claimed || key != string(body[3:]):
				t.Fatalf("%s: claim check %q: key %q, %v", name, body, key, claimed)
			case key == "":
				if !errors.As(derr, &undecodable) || !errors.As(cerr, &undecodable) {
					t.Fatalf("%s: empty key: %v, check %v", name, derr, cerr)
				}
			case !claimKeyAllowed(key):
				if !errors.As(derr, &fatal) || !errors.Is(derr, patterns.ErrInvalidClaimCheckKey) {
					t.Fatalf("%s: key %q outside the contract: %v, want fatal ErrInvalidClaimCheckKey", name, key, derr)
				}
			case key == heldKey && name == "filesystem":
				if derr != nil || cerr != nil || string(got) != held {
					t.Fatalf("%s: held key read as %q, %v, check %v", name, got, derr, cerr)
				}
			default:
				if !errors.As(derr, &undecodable) || cerr != nil {
					t.Fatalf("%s: key %q not held: %v, check %v", name, key, derr, cerr)
				}
			}
		}

		// What the codec writes, at any threshold, reads back, and a key it
		// wrote is one the contract allows.
		store := stores["memory"]
		codec, err := patterns.NewClaimCheckCodec(broker.Raw, store, patterns.ClaimCheckThreshold(max(threshold, 0)))
		if err != nil {
			t.Fatal(err)
		}
		framed, err := codec.Encode(body)
		if err != nil {
			t.Fatalf("encode %q: %v", body, err)
		}
		key, claimed := patterns.ClaimCheckKeyOf(framed)
		if claimed != (len(body) >= max(threshold, 0)) || claimed && !claimKeyAllowed(key) {
			t.Fatalf("%d bytes at threshold %d written as %q", len(body), threshold, framed)
		}
		var got []byte
		if err := codec.Decode(framed, &got); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%q written as %q read back as %q, %v", body, framed, got, err)
		}
		if claimed {
			if err := store.Delete(context.Background(), key); err != nil {
				t.Fatalf("delete %q: %v", key, err)
			}
		}
	})
}
