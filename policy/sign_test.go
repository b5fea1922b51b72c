package policy_test

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"aead.dev/minisign"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy"
)

// testKey is a generated, unencrypted key pair with its files.
type testKey struct {
	pubFile, keyFile []byte
	pub              policy.PublicKey
	key              policy.PrivateKey
}

func newTestKey(t *testing.T) testKey {
	t.Helper()
	pubFile, keyFile, err := policy.GenerateKey("")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := policy.ParsePublicKey(string(pubFile))
	if err != nil {
		t.Fatal(err)
	}
	key, err := policy.ParsePrivateKey(keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	return testKey{pubFile: pubFile, keyFile: keyFile, pub: pub, key: key}
}

// encryptedKey is generated once: every scrypt run costs 1 GiB and seconds.
var encryptedKey = sync.OnceValues(func() ([]byte, error) {
	_, keyFile, err := policy.GenerateKey("correct horse")
	return keyFile, err
})

var (
	helloModule   = []byte("\x00asm\x01\x00\x00\x00 hello module bytes")
	helloManifest = []byte("name: hello\nnet: [api.example.com]\n")
)

func sign(t *testing.T, key policy.PrivateKey, s policy.Signed) []byte {
	t.Helper()
	sig, err := policy.Sign(key, s)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sigError asserts err is a *SignatureError whose message contains want.
func sigError(t *testing.T, err error, want string) *policy.SignatureError {
	t.Helper()
	var se *policy.SignatureError
	if !errors.As(err, &se) {
		t.Fatalf("got %v (%T), want a *SignatureError containing %q", err, err, want)
	}
	if !strings.Contains(se.Error(), want) {
		t.Fatalf("got %q, want it to contain %q", se.Error(), want)
	}
	if se.Code() != abi.CodeDenied {
		t.Errorf("Code() = %q, want %q", se.Code(), abi.CodeDenied)
	}
	return se
}

// sigLines splits a .minisig into its four lines.
func sigLines(t *testing.T, sig []byte) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(sig), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("signature has %d lines, want 4:\n%s", len(lines), sig)
	}
	return lines
}

func joinLines(lines []string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

// editSigLine decodes base64 line i of sig, lets edit change it, and
// re-encodes it.
func editSigLine(t *testing.T, sig []byte, i int, edit func([]byte)) []byte {
	t.Helper()
	lines := sigLines(t, sig)
	b, err := base64.StdEncoding.DecodeString(lines[i])
	if err != nil {
		t.Fatal(err)
	}
	edit(b)
	lines[i] = base64.StdEncoding.EncodeToString(b)
	return joinLines(lines)
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

func TestSignVerifyRoundTrip(t *testing.T) {
	release, other := newTestKey(t), newTestKey(t)
	trusted := map[string]policy.PublicKey{"release": release.pub, "other": other.pub}
	for _, tt := range []struct {
		name         string
		manifest     []byte
		wantManifest string
	}{
		{"with manifest", helloManifest, sum(helloManifest)},
		{"without manifest", nil, ""},
		{"empty manifest file", []byte{}, sum(nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := policy.Signed{Name: "hello", Module: helloModule, Manifest: tt.manifest}
			v, err := policy.Verify(trusted, s, sign(t, release.key, s))
			if err != nil {
				t.Fatal(err)
			}
			want := policy.Verified{KeyName: "release", KeyID: release.pub.KeyID(), ModuleSHA256: sum(helloModule), ManifestSHA256: tt.wantManifest}
			if *v != want {
				t.Errorf("got %+v, want %+v", *v, want)
			}
		})
	}
	// The other trusted key is found by its key id, not by map order.
	s := policy.Signed{Name: "hello", Module: helloModule}
	if v, err := policy.Verify(trusted, s, sign(t, other.key, s)); err != nil || v.KeyName != "other" || v.KeyID != other.pub.KeyID() {
		t.Errorf("signed by other: got %+v, %v", v, err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	k := newTestKey(t)
	stranger := newTestKey(t)
	trusted := map[string]policy.PublicKey{"release": k.pub}
	signed := policy.Signed{Name: "hello", Module: helloModule, Manifest: helloManifest}
	sig := sign(t, k.key, signed)
	unmanifested := policy.Signed{Name: "hello", Module: helloModule}
	sigNoManifest := sign(t, k.key, unmanifested)
	otherModule := []byte("\x00asm\x01\x00\x00\x00 other module bytes")

	// A legacy ("Ed", not prehashed) minisign signature with a moat comment.
	mk := libraryKey(t, k.keyFile)
	legacyComment := "moat-v1 name=hello module-sha256=" + sum(helloModule) + " manifest-sha256=" + sum(helloManifest)

	edited := func(line int, edit func([]byte)) []byte { return editSigLine(t, sig, line, edit) }
	withComment := func(c string) []byte {
		lines := sigLines(t, sig)
		lines[2] = "trusted comment: " + c
		return joinLines(lines)
	}
	for _, tt := range []struct {
		name    string
		trusted map[string]policy.PublicKey
		s       policy.Signed
		sig     []byte
		want    string // "" means accepted
		keyID   string
	}{
		{"valid", trusted, signed, sig, "", ""},
		{"legacy Ed signature", trusted, signed, minisign.SignWithComments(mk, helloModule, legacyComment, "legacy"), "", ""},
		{"untrusted comment edited", trusted, signed, bytes.Replace(sig, []byte("from moat"), []byte("from mallory"), 1), "", ""},
		{"CRLF line ends", trusted, signed, bytes.ReplaceAll(sig, []byte("\n"), []byte("\r\n")), "", ""},

		{"module byte changed", trusted, policy.Signed{Name: "hello", Module: flip(helloModule, 9), Manifest: helloManifest}, sig,
			"signature: module hello: the module changed since signing (signed sha256:" + sum(helloModule)[:12] + "…, now sha256:" + sum(flip(helloModule, 9))[:12] + "…)", k.pub.KeyID()},
		{"manifest byte changed", trusted, policy.Signed{Name: "hello", Module: helloModule, Manifest: flip(helloManifest, 3)}, sig,
			"signature: module hello: the manifest changed since signing (signed sha256:" + sum(helloManifest)[:12] + "…, now sha256:" + sum(flip(helloManifest, 3))[:12] + "…)", k.pub.KeyID()},
		{"manifest removed", trusted, unmanifested, sig, "the manifest is missing (signed with one, sha256:" + sum(helloManifest)[:12] + "…)", k.pub.KeyID()},
		{"manifest added", trusted, signed, sigNoManifest, "a manifest was added since signing (signed without one, now sha256:" + sum(helloManifest)[:12] + "…)", k.pub.KeyID()},
		{"signature byte changed", trusted, signed, edited(1, func(b []byte) { b[40] ^= 1 }),
			"signature does not verify: the signature bytes were changed", k.pub.KeyID()},
		{"algorithm changed ED to Ed", trusted, signed, edited(1, func(b []byte) { b[1] = 'd' }),
			"signature does not verify: the signature was changed (the module is the one that was signed)", k.pub.KeyID()},
		{"global signature byte changed", trusted, signed, edited(3, func(b []byte) { b[7] ^= 1 }),
			"signature does not verify: its trusted comment (or the global signature over it) was changed", k.pub.KeyID()},
		{"trusted comment byte changed", trusted, signed, bytes.Replace(sig, []byte("name=hello"), []byte("name=hellp"), 1),
			"signature does not verify: its trusted comment (or the global signature over it) was changed", k.pub.KeyID()},
		{"trusted comment extended", trusted, signed, bytes.Replace(sig, []byte(" manifest-sha256="), []byte(" net=all manifest-sha256="), 1),
			"its trusted comment (or the global signature over it) was changed", k.pub.KeyID()},

		{"signature of another module, same bytes", trusted, signed, sign(t, k.key, policy.Signed{Name: "other", Module: helloModule, Manifest: helloManifest}),
			"signature: module hello: signature is for module other, not hello", k.pub.KeyID()},
		{"signature of another module, its own bytes", trusted, signed, sign(t, k.key, policy.Signed{Name: "other", Module: otherModule, Manifest: helloManifest}),
			"signature: module hello: signature is for module other, not hello", k.pub.KeyID()},

		{"untrusted key", trusted, signed, sign(t, stranger.key, signed),
			"signature: module hello: not signed by a trusted key (key id " + stranger.pub.KeyID() + " is not in the profile's trusted_keys)", stranger.pub.KeyID()},
		{"no trusted keys", nil, signed, sig, "not signed by a trusted key (key id " + k.pub.KeyID() + " is not in the profile's trusted_keys, which is empty)", k.pub.KeyID()},
		{"zero PublicKey trusts nothing", map[string]policy.PublicKey{"zero": {}}, signed, sig, "not signed by a trusted key", k.pub.KeyID()},
		{"trusted key id, other key", map[string]policy.PublicKey{"impostor": sameIDOtherKey(t, k.pub)}, signed, sig,
			"signature does not verify: the signature bytes were changed", k.pub.KeyID()},

		{"plain minisign signature", trusted, signed, minisign.Sign(mk, helloModule), "not a moat signature: its trusted comment is \"timestamp:", k.pub.KeyID()},
		{"future format", trusted, signed, minisign.SignWithComments(mk, helloModule, "moat-v2 whatever", ""), "signature uses format moat-v2; this moat understands moat-v1", k.pub.KeyID()},
		{"malformed trusted comment", trusted, signed, minisign.SignWithComments(mk, helloModule, "moat-v1 name=hello", ""), "malformed trusted comment", k.pub.KeyID()},

		{"unsigned", trusted, signed, nil, "signature: module hello: unsigned: no signature", ""},
		{"empty file", trusted, signed, []byte{}, "malformed signature file: the file is empty", ""},
		{"garbage", trusted, signed, []byte("\x7fELF\x02\x01\x01 not a signature"), "malformed signature file:", ""},
		{"truncated", trusted, signed, sig[:len(sig)/2], "malformed signature file: ", ""},
		{"truncated in the last line", trusted, signed, sig[:len(sig)-10], "malformed signature file: line 4 (the global signature) is not base64", ""},
		{"trailing garbage", trusted, signed, append(bytes.Clone(sig), "more\n"...), "malformed signature file: 5 lines, expected 4", ""},
		{"no trusted comment prefix", trusted, signed, bytes.Replace(sig, []byte("\ntrusted comment: "), []byte("\ncomment: "), 1), `line 3 does not start with "trusted comment: "`, ""},
		{"re-encoded unchanged", trusted, signed, edited(1, func([]byte) {}), "", ""}, // editSigLine itself changes nothing
		{"unknown algorithm", trusted, signed, edited(1, func(b []byte) { copy(b, "Xx") }), `malformed signature file: unsupported signature algorithm "Xx"`, ""},
		{"non-canonical base64", trusted, signed, nonCanonical(t, sig), "malformed signature file: line 2 (the signature) is not base64", ""},
		{"bad module name", trusted, policy.Signed{Name: "hello world", Module: helloModule}, sig, "cannot check the signature: the module name \"hello world\" contains ' '", ""},
		{"comment of another module", trusted, signed, withComment(strings.Replace(legacyComment, "name=hello", "name=evil", 1)),
			"its trusted comment (or the global signature over it) was changed", k.pub.KeyID()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := policy.Verify(tt.trusted, tt.s, tt.sig)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if v.KeyName != "release" {
					t.Errorf("KeyName = %q", v.KeyName)
				}
				return
			}
			if v != nil {
				t.Errorf("got Verified %+v with an error", v)
			}
			se := sigError(t, err, tt.want)
			if se.Module != tt.s.Name || se.KeyID != tt.keyID {
				t.Errorf("Module, KeyID = %q, %q; want %q, %q", se.Module, se.KeyID, tt.s.Name, tt.keyID)
			}
		})
	}
}

// TestEveryByteMatters flips each byte of the module, the manifest and the
// signature file in turn: every change must be refused, except in the
// untrusted comment, which minisign does not sign either.
func TestEveryByteMatters(t *testing.T) {
	k := newTestKey(t)
	trusted := map[string]policy.PublicKey{"release": k.pub}
	signed := policy.Signed{Name: "hello", Module: helloModule, Manifest: helloManifest}
	sig := sign(t, k.key, signed)

	for i := range signed.Module {
		s := signed
		s.Module = flip(signed.Module, i)
		_, err := policy.Verify(trusted, s, sig)
		if err == nil {
			t.Fatalf("module byte %d changed: accepted", i)
		}
		sigError(t, err, "the module changed since signing")
	}
	for i := range signed.Manifest {
		s := signed
		s.Manifest = flip(signed.Manifest, i)
		_, err := policy.Verify(trusted, s, sig)
		if err == nil {
			t.Fatalf("manifest byte %d changed: accepted", i)
		}
		sigError(t, err, "the manifest changed since signing")
	}
	// The text of the untrusted comment, after its "untrusted comment: "
	// prefix and before the newline, is the only part nobody signs.
	from, to := len("untrusted comment: "), bytes.IndexByte(sig, '\n')
	for i := range sig {
		unsigned := from <= i && i < to
		_, err := policy.Verify(trusted, signed, flip(sig, i))
		switch {
		case unsigned && err != nil:
			t.Errorf("untrusted comment byte %d changed: refused: %v", i, err)
		case !unsigned && err == nil:
			t.Fatalf("signature file byte %d (%q) changed: accepted", i, sig[i])
		case !unsigned:
			var se *policy.SignatureError
			if !errors.As(err, &se) {
				t.Fatalf("byte %d: %T %v", i, err, err)
			}
		}
	}
}

func TestSignatureErrorAndFiles(t *testing.T) {
	err := policy.UnsignedError("hello-go", filepath.Join("modules", "hello.wasm"))
	if got, want := err.Error(), "signature: module hello-go: unsigned: no hello.wasm.minisig"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err.Code() != abi.CodeDenied {
		t.Errorf("Code() = %q", err.Code())
	}
	if got := policy.SignatureFile("dir/hello.wasm"); got != "dir/hello.wasm.minisig" {
		t.Errorf("SignatureFile = %q", got)
	}
	e := &policy.SignatureError{Module: "hello-go", Reason: "because"}
	if e.Error() != "signature: module hello-go: because" {
		t.Errorf("Error() = %q", e.Error())
	}
}

func TestSignRefuses(t *testing.T) {
	k := newTestKey(t)
	for _, tt := range []struct {
		name string
		key  policy.PrivateKey
		s    policy.Signed
		want string
	}{
		{"zero key", policy.PrivateKey{}, policy.Signed{Name: "hello", Module: helloModule}, "the private key is empty"},
		{"no name", k.key, policy.Signed{Module: helloModule}, "the module name is empty"},
		{"space in name", k.key, policy.Signed{Name: "a b", Module: helloModule}, `contains ' '`},
		{"newline in name", k.key, policy.Signed{Name: "a\nb", Module: helloModule}, `contains '\n'`},
		{"long name", k.key, policy.Signed{Name: strings.Repeat("n", 129), Module: helloModule}, "the limit is 128"},
		{"empty module", k.key, policy.Signed{Name: "hello"}, "the module is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sig, err := policy.Sign(tt.key, tt.s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %q, %v; want an error containing %q", sig, err, tt.want)
			}
		})
	}
}

func TestParsePublicKey(t *testing.T) {
	k := newTestKey(t)
	lines := strings.Split(strings.TrimSpace(string(k.pubFile)), "\n")
	for _, tt := range []struct {
		name, in, want string // want "" means accepted
	}{
		{"whole file", string(k.pubFile), ""},
		{"RW line", lines[1], ""},
		{"RW line with spaces", "  " + lines[1] + "\n", ""},
		{"CRLF file", strings.ReplaceAll(string(k.pubFile), "\n", "\r\n"), ""},
		{"empty", "", "not a minisign public key (expected the RW… line of a .pub file, or the whole file): it is empty"},
		{"garbage", "hello world", "not a minisign public key (expected the RW… line of a .pub file, or the whole file): \"hello world\" is not base64"},
		{"truncated", lines[1][:40], "not a minisign public key"},
		{"comment only", lines[0], "the key line is missing"},
		{"private key", string(k.keyFile), "this is a private key"},
		{"signature", string(sign(t, k.key, policy.Signed{Name: "hello", Module: helloModule})), "this is a signature (.minisig file), not a key"},
		{"wrong algorithm", base64.StdEncoding.EncodeToString(append([]byte("Xy"), make([]byte, 40)...)), `unsupported key algorithm "Xy"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pub, err := policy.ParsePublicKey(tt.in)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want an error containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pub.String() != lines[1] || pub.KeyID() != k.pub.KeyID() {
				t.Errorf("got %s %s, want %s %s", pub.KeyID(), pub, k.pub.KeyID(), lines[1])
			}
		})
	}
	// The key id is what minisign prints: 16 upper-case hex digits, and the
	// comment line of the .pub file names it.
	id := k.pub.KeyID()
	if len(id) != 16 || strings.ToUpper(id) != id || lines[0] != "untrusted comment: minisign public key "+id {
		t.Errorf("KeyID %q, comment line %q", id, lines[0])
	}
	if !strings.HasPrefix(k.pub.String(), "RW") {
		t.Errorf("String() = %q, want the RW… line", k.pub)
	}
	if k.key.Public().String() != k.pub.String() {
		t.Errorf("PrivateKey.Public() = %s, want %s", k.key.Public(), k.pub)
	}
	var zero policy.PublicKey
	if zero.KeyID() != "" || zero.String() != "" {
		t.Errorf("zero PublicKey: %q %q", zero.KeyID(), zero.String())
	}
}

func TestParsePrivateKey(t *testing.T) {
	k := newTestKey(t)
	corrupt := editKeyFile(t, k.keyFile, func(b []byte) { b[158-32-1] ^= 1 }) // last byte of the public half
	for _, tt := range []struct {
		name     string
		data     []byte
		password string
		want     string // "" means accepted
	}{
		{"unencrypted", k.keyFile, "", ""},
		{"unencrypted, password ignored", k.keyFile, "anything", ""},
		{"key line only", []byte(strings.Split(string(k.keyFile), "\n")[1]), "", ""},
		{"public key given", k.pubFile, "", "this is a minisign public key (the .pub file or its RW… line), but a private key is expected"},
		{"public RW line given", []byte(k.pub.String()), "", "this is a minisign public key"},
		{"signature given", sign(t, k.key, policy.Signed{Name: "hello", Module: helloModule}), "", "this is a signature (.minisig file), not a key"},
		{"empty", nil, "", "not a minisign private key (expected a secret key file from GenerateKey or `minisign -G`"},
		{"garbage", []byte("untrusted comment: x\n!!!!\n"), "", `not a minisign private key (expected a secret key file from GenerateKey or ` + "`minisign -G`" + `: an 'untrusted comment:' line and a base64 line): "!!!!" is not base64`},
		{"wrong size", []byte("untrusted comment: x\nRWRXYWxsbw==\n"), "", "it decodes to 7 bytes, a secret key has 158"},
		{"unknown kdf", editKeyFile(t, k.keyFile, func(b []byte) { copy(b[2:], "Ar") }), "", `unsupported key encryption "Ar"`},
		{"corrupted public half", corrupt, "", "the private key file is corrupted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key, err := policy.ParsePrivateKey(tt.data, tt.password)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want an error containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if key.Public().String() != k.pub.String() {
				t.Errorf("Public() = %s, want %s", key.Public(), k.pub)
			}
		})
	}
}

// TestEncryptedKey runs scrypt with minisign's cost (1 GiB, seconds) three
// times: generate, decrypt, and fail to decrypt.
func TestEncryptedKey(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: scrypt at minisign's cost takes 1 GiB and seconds per run")
	}
	keyFile, err := encryptedKey()
	if err != nil {
		t.Fatal(err)
	}
	raw := decodeKeyFile(t, keyFile)
	if string(raw[2:4]) != "Sc" || !minisign.IsEncrypted(keyFile) {
		t.Fatalf("key file is not scrypt-encrypted: kdf %q", raw[2:4])
	}
	if _, err := policy.ParsePrivateKey(keyFile, ""); err == nil || !strings.Contains(err.Error(), "the private key is encrypted: give its password") {
		t.Errorf("no password: got %v", err)
	}
	_, err = policy.ParsePrivateKey(keyFile, "wrong horse")
	if !errors.Is(err, policy.ErrWrongPassword) {
		t.Errorf("wrong password: got %v, want ErrWrongPassword", err)
	}
	key, err := policy.ParsePrivateKey(keyFile, "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	s := policy.Signed{Name: "hello", Module: helloModule}
	if _, err := policy.Verify(map[string]policy.PublicKey{"release": key.Public()}, s, sign(t, key, s)); err != nil {
		t.Error(err)
	}
}

// TestSignatureFileFormat checks by hand what stock minisign checks, so that
// interoperability is tested where the minisign binary is not installed.
func TestSignatureFileFormat(t *testing.T) {
	k := newTestKey(t)
	s := policy.Signed{Name: "hello-go", Module: helloModule, Manifest: helloManifest}
	sig := sign(t, k.key, s)
	if !bytes.HasSuffix(sig, []byte("\n")) {
		t.Error("signature file does not end with a newline")
	}
	lines := sigLines(t, sig)

	// The .pub file: "untrusted comment: …", then "Ed" || key id || key.
	pubLines := strings.Split(strings.TrimSuffix(string(k.pubFile), "\n"), "\n")
	if len(pubLines) != 2 || !strings.HasPrefix(pubLines[0], "untrusted comment: ") {
		t.Fatalf("public key file:\n%s", k.pubFile)
	}
	pubRaw, err := base64.StdEncoding.DecodeString(pubLines[1])
	if err != nil || len(pubRaw) != 42 || string(pubRaw[:2]) != "Ed" {
		t.Fatalf("public key line %q: %d bytes, %v", pubLines[1], len(pubRaw), err)
	}
	pubKeyID, pub := pubRaw[2:10], ed25519.PublicKey(pubRaw[10:])

	if lines[0] != "untrusted comment: signature from moat" {
		t.Errorf("line 1 = %q", lines[0])
	}
	sigRaw, err := base64.StdEncoding.DecodeString(lines[1])
	if err != nil || len(sigRaw) != 74 {
		t.Fatalf("line 2: %d bytes, %v", len(sigRaw), err)
	}
	alg, keyID, edSig := sigRaw[:2], sigRaw[2:10], sigRaw[10:]
	if string(alg) != "ED" {
		t.Errorf("algorithm %q, want \"ED\" (prehashed, stock minisign's default)", alg)
	}
	if !bytes.Equal(keyID, pubKeyID) {
		t.Errorf("key id %X, public key's %X", keyID, pubKeyID)
	}
	if got := strings.ToUpper(hex.EncodeToString(reverse(keyID))); got != k.pub.KeyID() {
		t.Errorf("key id as minisign prints it: %s, KeyID() %s", got, k.pub.KeyID())
	}
	wantComment := "moat-v1 name=hello-go module-sha256=" + sum(helloModule) + " manifest-sha256=" + sum(helloManifest)
	if lines[2] != "trusted comment: "+wantComment {
		t.Errorf("line 3 = %q, want %q", lines[2], "trusted comment: "+wantComment)
	}
	globalSig, err := base64.StdEncoding.DecodeString(lines[3])
	if err != nil || len(globalSig) != 64 {
		t.Fatalf("line 4: %d bytes, %v", len(globalSig), err)
	}

	// What minisign -V does: Ed25519 over BLAKE2b-512(file) ("ED"), then
	// the global signature over signature || trusted comment.
	if !crypto.BLAKE2b_512.Available() {
		t.Fatal("BLAKE2b-512 is not registered (aead.dev/minisign imports golang.org/x/crypto/blake2b)")
	}
	h := crypto.BLAKE2b_512.New()
	h.Write(helloModule)
	if !ed25519.Verify(pub, h.Sum(nil), edSig) {
		t.Error("the signature does not verify over BLAKE2b-512(module)")
	}
	if !ed25519.Verify(pub, append(bytes.Clone(edSig), wantComment...), globalSig) {
		t.Error("the global signature does not verify over signature || trusted comment")
	}

	// The secret key file: "Ed", KDF none, "B2", then key id and key at
	// their minisign offsets.
	raw := decodeKeyFile(t, k.keyFile)
	if string(raw[:2]) != "Ed" || string(raw[2:4]) != "\x00\x00" || string(raw[4:6]) != "B2" || !bytes.Equal(raw[54:62], pubKeyID) || !bytes.Equal(raw[62+32:62+64], pub) {
		t.Errorf("secret key file header %q, key id %X", raw[:6], raw[54:62])
	}
}

// TestMinisignTool verifies with the stock minisign binary when there is one.
func TestMinisignTool(t *testing.T) {
	bin, err := exec.LookPath("minisign")
	if err != nil {
		t.Skip("minisign is not on PATH; TestSignatureFileFormat checks the format by hand instead")
	}
	k := newTestKey(t)
	dir := t.TempDir()
	module := filepath.Join(dir, "hello.wasm")
	pubFile := filepath.Join(dir, "key.pub")
	s := policy.Signed{Name: "hello", Module: helloModule, Manifest: helloManifest}
	for name, data := range map[string][]byte{module: helloModule, pubFile: k.pubFile, policy.SignatureFile(module): sign(t, k.key, s)} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"-Vm", module, "-p", pubFile}, {"-V", "-H", "-m", module, "-p", pubFile}} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Errorf("minisign %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.WriteFile(module, flip(helloModule, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-Vm", module, "-p", pubFile).CombinedOutput(); err == nil {
		t.Errorf("minisign accepted a changed module:\n%s", out)
	}
}

// libraryKey reads an unencrypted key file with the library itself, which
// also shows that GenerateKey writes what the library reads.
func libraryKey(t *testing.T, keyFile []byte) minisign.PrivateKey {
	t.Helper()
	var mk minisign.PrivateKey
	if err := mk.UnmarshalText(keyFile); err != nil {
		t.Fatal(err)
	}
	return mk
}

// sameIDOtherKey returns a new public key that claims pub's key id.
func sameIDOtherKey(t *testing.T, pub policy.PublicKey) policy.PublicKey {
	t.Helper()
	other := newTestKey(t)
	a, _ := base64.StdEncoding.DecodeString(pub.String())
	b, _ := base64.StdEncoding.DecodeString(other.pub.String())
	copy(b[2:10], a[2:10])
	k, err := policy.ParsePublicKey(base64.StdEncoding.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// nonCanonical sets unused low bits of the signature line's last base64
// digit: the bytes decode the same, but the file changed.
func nonCanonical(t *testing.T, sig []byte) []byte {
	t.Helper()
	lines := sigLines(t, sig)
	l := []byte(lines[1])
	last := bytes.IndexByte(l, '=') - 1 // 74 bytes: one '=' of padding, 2 unused bits
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	l[last] = alphabet[strings.IndexByte(alphabet, l[last])|1]
	if string(l) == lines[1] {
		l[last] = alphabet[strings.IndexByte(alphabet, l[last])&^1]
	}
	if b, err := base64.StdEncoding.DecodeString(string(l)); err != nil || base64.StdEncoding.EncodeToString(b) != lines[1] {
		t.Fatalf("not a non-canonical encoding of the same bytes: %v", err)
	}
	lines[1] = string(l)
	return joinLines(lines)
}

func decodeKeyFile(t *testing.T, keyFile []byte) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(keyFile), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "untrusted comment: ") {
		t.Fatalf("key file:\n%s", keyFile)
	}
	raw, err := base64.StdEncoding.DecodeString(lines[1])
	if err != nil || len(raw) != 158 {
		t.Fatalf("key line: %d bytes, %v", len(raw), err)
	}
	return raw
}

func editKeyFile(t *testing.T, keyFile []byte, edit func([]byte)) []byte {
	t.Helper()
	raw := decodeKeyFile(t, keyFile)
	edit(raw)
	return []byte("untrusted comment: edited\n" + base64.StdEncoding.EncodeToString(raw) + "\n")
}

// reverse turns minisign's little-endian key id into the order it prints.
func reverse(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[i] = b[len(b)-1-i]
	}
	return r
}
