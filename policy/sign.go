package policy

// Module signatures.
//
// A signed module is three files side by side:
//
//	hello.wasm          the module bytes
//	moat.yaml           its manifest (optional; its bytes as on disk)
//	hello.wasm.minisig  a minisign signature
//
// The signature is a standard minisign signature over the module bytes, so
// the stock tool checks it (`minisign -Vm hello.wasm -p key.pub`) and an
// operator never has to trust moat's own code to audit a module. minisign
// also signs the signature's trusted comment (the "global signature" over
// signature || trusted comment), and moat puts everything else it needs to
// bind into that comment:
//
//	moat-v1 name=<module name> module-sha256=<hex> manifest-sha256=<hex or "none">
//
// So the manifest, which grants the module its permissions, cannot be swapped
// or edited without breaking the signature, and a signature made for one
// module cannot be presented for another. Only the untrusted comment line of
// the .minisig can change without effect; minisign does not sign it either.
//
// Library notes (aead.dev/minisign v0.3.0):
//   - Signatures come in two flavours: "Ed" (legacy: Ed25519 over the
//     message) and "ED" (Ed25519 over the BLAKE2b-512 of the message). The
//     library's minisign.Sign/SignWithComments produce "Ed"; its Reader
//     produces "ED", which is also what current stock minisign writes by
//     default (-l asks it for legacy) and the only flavour `minisign -V -H`
//     accepts. Sign therefore uses the Reader: "ED". Verify accepts both,
//     as minisign.Verify and the stock tool do.
//   - Secret keys can be written unencrypted (PrivateKey.MarshalText: KDF
//     "\0\0", the format of current stock minisign's `-W` keys) or
//     encrypted with scrypt (EncryptKey, with libsodium's "sensitive" cost:
//     about 1 GiB of memory and a few seconds, exactly like the stock tool).

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"aead.dev/minisign"

	"github.com/moat-sandbox/moat/abi"
)

const (
	// signatureVersion starts every trusted comment moat writes. A later
	// format gets a new version so that an old moat refuses it by name
	// instead of misreading it.
	signatureVersion = "moat-v1"

	// untrustedComment is the first line of every .minisig moat writes.
	// minisign does not sign it, so moat never reads it.
	untrustedComment = "signature from moat"

	// maxSignedNameLen bounds a module name in a trusted comment; stock
	// minisign limits the whole comment line to 8 KiB.
	maxSignedNameLen = 128

	// Field sizes of the minisign binary formats (see minisign.h).
	algEd             = "Ed" // legacy: Ed25519 over the message
	algED             = "ED" // Ed25519 over BLAKE2b-512(message)
	sigLineSize       = 2 + 8 + ed25519.SignatureSize
	publicKeySize     = 2 + 8 + ed25519.PublicKeySize
	secretKeySize     = 2 + 2 + 2 + 32 + 8 + 8 + 8 + 64 + 32
	scryptMaxOpsLimit = 0x2000000  // what DecryptKey accepts at most
	scryptMaxMemLimit = 0x40000000 // what DecryptKey accepts at most
)

// ErrWrongPassword is returned (wrapped) by ParsePrivateKey when the key is
// encrypted and the password does not decrypt it, so that a command can ask
// for the password again instead of failing.
var ErrWrongPassword = errors.New("wrong password for the private key")

// PublicKey is a minisign public key: what an operator lists in a profile's
// trusted_keys to say "modules signed by this key may run". The zero
// PublicKey trusts nothing.
type PublicKey struct {
	key minisign.PublicKey
	raw ed25519.PublicKey // nil for the zero PublicKey
}

// KeyID returns the key id as minisign prints it: 16 upper-case hex digits.
// Signatures carry it so that a refusal can name the key that signed. It is
// "" for the zero PublicKey.
func (k PublicKey) KeyID() string {
	if k.raw == nil {
		return ""
	}
	return keyIDString(k.key.ID())
}

// String returns the key in its one-line form, the "RW…" line of a .pub file,
// which is also what `minisign -P` takes. ParsePublicKey reads it back. It is
// "" for the zero PublicKey.
func (k PublicKey) String() string {
	if k.raw == nil {
		return ""
	}
	return k.key.String()
}

// PrivateKey is a decrypted minisign secret key, ready to sign. Get one from
// ParsePrivateKey; the zero PrivateKey cannot sign.
type PrivateKey struct {
	key minisign.PrivateKey
	pub PublicKey
}

// Public returns the public key that verifies this key's signatures.
func (k PrivateKey) Public() PublicKey { return k.pub }

// GenerateKey makes a new Ed25519 key pair and returns it as the two files
// the stock minisign tool writes (`minisign -G`), so that keys are
// interchangeable between moat and minisign:
//
//   - publicKeyFile: "untrusted comment: minisign public key <ID>" and the
//     RW… line;
//   - privateKeyFile: the secret key file, encrypted with password (scrypt,
//     with minisign's cost of about 1 GiB of memory and a few seconds, so a
//     stolen file resists guessing). With password == "" the key is stored
//     unencrypted, like `minisign -G -W`; use that only where the file is
//     protected otherwise (a CI secret store, a test). Current stock
//     minisign reads such keys (its -W option); old versions do not.
func GenerateKey(password string) (publicKeyFile, privateKeyFile []byte, err error) {
	pub, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	// Written by hand rather than with pub.MarshalText, whose comment line
	// drops the leading zeros of the key id; this is the stock tool's line.
	publicKeyFile = fmt.Appendf(nil, "untrusted comment: minisign public key %s\n%s\n", keyIDString(pub.ID()), pub.String())
	if password != "" {
		privateKeyFile, err = minisign.EncryptKey(password, priv)
	} else {
		privateKeyFile, err = priv.MarshalText()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	return publicKeyFile, append(privateKeyFile, '\n'), nil
}

// ParsePublicKey reads a minisign public key from its RW… line (as printed by
// `minisign -G` and accepted by `minisign -P`) or from the whole content of a
// .pub file, so a profile can hold either. It says what it got instead when
// it is given a private key or a signature.
func ParsePublicKey(s string) (PublicKey, error) {
	fail := func(format string, args ...any) (PublicKey, error) {
		return PublicKey{}, fmt.Errorf("not a minisign public key (expected the RW… line of a .pub file, or the whole file): "+format, args...)
	}
	line, err := keyLine(s)
	if err != nil {
		return fail("%v", err)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(line)
	if err != nil {
		return fail("%q is not base64", abbreviate(line, 24))
	}
	switch {
	case len(b) == secretKeySize:
		return fail("this is a private key (the secret key file); give its public key instead, and keep the private key secret")
	case len(b) != publicKeySize:
		return fail("it decodes to %d bytes, a public key has %d", len(b), publicKeySize)
	case string(b[:2]) != algEd:
		return fail("unsupported key algorithm %q (minisign keys are %q)", b[:2], algEd)
	}
	var key minisign.PublicKey
	if err := key.UnmarshalText([]byte(line)); err != nil {
		return fail("%v", err)
	}
	return newPublicKey(key), nil
}

// ParsePrivateKey reads a minisign secret key file, as written by
// GenerateKey or by `minisign -G`, and decrypts it with password when it is
// encrypted. An unencrypted key ignores password. The errors tell apart a
// wrong password (wrapping ErrWrongPassword), a public key or a signature
// given by mistake, and a file that is no key at all.
func ParsePrivateKey(data []byte, password string) (PrivateKey, error) {
	notKey := func(format string, args ...any) (PrivateKey, error) {
		return PrivateKey{}, fmt.Errorf("not a minisign private key (expected a secret key file from GenerateKey or `minisign -G`: an 'untrusted comment:' line and a base64 line): "+format, args...)
	}
	line, err := keyLine(string(data))
	if err != nil {
		return notKey("%v", err)
	}
	b, err := base64.StdEncoding.DecodeString(line)
	if err != nil {
		return notKey("%q is not base64", abbreviate(line, 24))
	}
	if len(b) == publicKeySize && string(b[:2]) == algEd {
		return PrivateKey{}, errors.New("this is a minisign public key (the .pub file or its RW… line), but a private key is expected: give the secret key file")
	}
	if len(b) != secretKeySize {
		return notKey("it decodes to %d bytes, a secret key has %d", len(b), secretKeySize)
	}
	sigAlg, kdfAlg, chkAlg := string(b[0:2]), string(b[2:4]), string(b[4:6])
	if sigAlg != algEd {
		return notKey("unsupported key algorithm %q (minisign keys are %q)", sigAlg, algEd)
	}
	if chkAlg != "B2" {
		return notKey("unsupported checksum algorithm %q (minisign keys use \"B2\")", chkAlg)
	}
	var key minisign.PrivateKey
	switch kdfAlg {
	case "\x00\x00": // unencrypted (`minisign -W`)
		if err := key.UnmarshalText([]byte(line)); err != nil {
			return notKey("%v", err)
		}
	case "Sc": // scrypt
		if password == "" {
			return PrivateKey{}, errors.New("the private key is encrypted: give its password")
		}
		// DecryptKey refuses costs above these with the same error as a
		// wrong password; check first so that ErrWrongPassword means it.
		ops, mem := binary.LittleEndian.Uint64(b[38:46]), binary.LittleEndian.Uint64(b[46:54])
		if ops > scryptMaxOpsLimit || mem > scryptMaxMemLimit {
			return PrivateKey{}, fmt.Errorf("the private key asks for a key derivation cost beyond minisign's limits (ops %d, memory %d bytes)", ops, mem)
		}
		key, err = minisign.DecryptKey(password, []byte(line))
		if err != nil {
			return PrivateKey{}, fmt.Errorf("%w (or the key file is corrupted)", ErrWrongPassword)
		}
	default:
		return notKey("unsupported key encryption %q (minisign keys use \"Sc\" or none)", kdfAlg)
	}
	pub, ok := key.Public().(minisign.PublicKey)
	if !ok {
		return PrivateKey{}, errors.New("private key: the minisign library returned no public key")
	}
	// An unencrypted key carries no usable checksum, so a damaged file would
	// otherwise surface only as signatures that nobody can verify.
	probe := []byte("moat key check")
	if !minisign.Verify(pub, probe, minisign.Sign(key, probe)) {
		return PrivateKey{}, errors.New("the private key file is corrupted: its public half does not match its secret half")
	}
	return PrivateKey{key: key, pub: newPublicKey(pub)}, nil
}

// Signed is what a signature covers: the module's name, its bytes and its
// manifest's bytes as on disk. Manifest is nil when the module has none; an
// empty but present manifest file is a non-nil empty slice, and is signed
// as such.
type Signed struct {
	Name     string
	Module   []byte
	Manifest []byte
}

// Sign signs s.Module with key and binds s.Name and s.Manifest through the
// trusted comment. It returns the content of the .minisig file to write next
// to the module (see SignatureFile). The signature is minisign's prehashed
// "ED" flavour, the stock tool's default, so `minisign -Vm` (with or without
// -H) verifies it.
func Sign(key PrivateKey, s Signed) ([]byte, error) {
	if key.pub.raw == nil {
		return nil, errors.New("sign: the private key is empty: load it with ParsePrivateKey")
	}
	if err := checkSignedName(s.Name); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if len(s.Module) == 0 {
		return nil, fmt.Errorf("sign: module %s: the module is empty", s.Name)
	}
	manifest := "none"
	if s.Manifest != nil {
		manifest = sha256Hex(s.Manifest)
	}
	comment := fmt.Sprintf("%s name=%s module-sha256=%s manifest-sha256=%s", signatureVersion, s.Name, sha256Hex(s.Module), manifest)

	r := minisign.NewReader(bytes.NewReader(s.Module))
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return r.SignWithComments(key.key, comment, untrustedComment), nil
}

// Verified is what a successful Verify proved: which trusted key signed, and
// the digests it signed. ManifestSHA256 is "" when the module has no
// manifest.
type Verified struct {
	KeyName        string // the name of the key in the trusted map
	KeyID          string // minisign key id, 16 upper-case hex digits
	ModuleSHA256   string // hex
	ManifestSHA256 string // hex, or "" for no manifest
}

// SignatureError is why a module's signature was refused. Reason is written
// for the operator: it says which part changed (the module, the manifest,
// the signature, its trusted comment) or which key is missing from the
// profile, so that a refusal can be fixed without guessing.
type SignatureError struct {
	Module string // the module name being verified
	Reason string
	KeyID  string // the key id the signature names; "" when unknown
	// UnknownKey: the signature is well-formed but names a key that is not
	// trusted, so it could not be checked at all (as opposed to failing).
	UnknownKey bool
}

func (e *SignatureError) Error() string {
	if e.Module == "" {
		return "signature: " + e.Reason
	}
	return "signature: module " + e.Module + ": " + e.Reason
}

// Code classifies the failure for the host: running an unsigned or badly
// signed module is refused by policy.
func (e *SignatureError) Code() abi.Code { return abi.CodeDenied }

// ErrorCode is Code, for abi.CodeOf.
func (e *SignatureError) ErrorCode() abi.Code { return e.Code() }

// UnsignedError is the refusal for a module that has no signature file: the
// caller looks for SignatureFile(modulePath), and when it does not exist
// reports this rather than calling Verify, so that the message names the
// missing file.
func UnsignedError(module, modulePath string) *SignatureError {
	return &SignatureError{Module: module, Reason: "unsigned: no " + filepath.Base(SignatureFile(modulePath))}
}

// SignatureFile returns where the signature of the module at modulePath
// lives: next to it, with minisign's ".minisig" suffix, which is where
// `minisign -Vm` looks by default.
func SignatureFile(modulePath string) string { return modulePath + ".minisig" }

// Verify checks sig (the content of the .minisig file) against s, accepting
// only signatures from a key in trusted (keys by name, as in a profile's
// trusted_keys). The signature must verify as minisign verifies it, and its
// trusted comment must name s.Name and the digest of s.Manifest (or "none"
// when s.Manifest is nil). A nil sig means the module is unsigned; see also
// UnsignedError.
//
// Every error is a *SignatureError whose reason says what differs: the key
// is not trusted (with its key id), the module, the manifest, the signature
// or its trusted comment changed, the signature is for another module, or
// the file is malformed.
func Verify(trusted map[string]PublicKey, s Signed, sig []byte) (*Verified, error) {
	refuse := func(keyID, format string, args ...any) (*Verified, error) {
		return nil, &SignatureError{Module: s.Name, KeyID: keyID, Reason: fmt.Sprintf(format, args...)}
	}
	if err := checkSignedName(s.Name); err != nil {
		return refuse("", "cannot check the signature: %v", err)
	}
	if sig == nil {
		return refuse("", "unsigned: no signature (no .minisig file next to the module)")
	}
	f, err := parseSignatureFile(sig)
	if err != nil {
		return refuse("", "malformed signature file: %v", err)
	}
	keyID := keyIDString(f.keyID)

	var names []string
	for name, k := range trusted {
		if k.raw != nil && k.key.ID() == f.keyID {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		reason := fmt.Sprintf("not signed by a trusted key (key id %s is not in the profile's trusted_keys)", keyID)
		if len(trusted) == 0 {
			reason = fmt.Sprintf("not signed by a trusted key (key id %s is not in the profile's trusted_keys, which is empty)", keyID)
		}
		return nil, &SignatureError{Module: s.Name, KeyID: keyID, Reason: reason, UnknownKey: true}
	}
	sort.Strings(names)

	moduleSum := sha256Hex(s.Module)
	for _, name := range names {
		if !minisign.Verify(trusted[name].key, s.Module, sig) {
			continue
		}
		// The trusted comment is authentic: check what it binds.
		claim, err := parseTrustedComment(f.trustedComment)
		if err != nil {
			return refuse(keyID, "%v", err)
		}
		if claim.name != s.Name {
			return refuse(keyID, "signature is for module %s, not %s", claim.name, s.Name)
		}
		if claim.module != moduleSum {
			// The signature covers the module bytes, so only a broken
			// signer gets here.
			return refuse(keyID, "signature is inconsistent: it signs module sha256:%s but its trusted comment says sha256:%s", short(moduleSum), short(claim.module))
		}
		manifestSum := ""
		if s.Manifest != nil {
			manifestSum = sha256Hex(s.Manifest)
		}
		switch {
		case claim.manifest == "none" && s.Manifest != nil:
			return refuse(keyID, "a manifest was added since signing (signed without one, now sha256:%s)", short(manifestSum))
		case claim.manifest != "none" && s.Manifest == nil:
			return refuse(keyID, "the manifest is missing (signed with one, sha256:%s)", short(claim.manifest))
		case claim.manifest != "none" && claim.manifest != manifestSum:
			return refuse(keyID, "the manifest changed since signing (signed sha256:%s, now sha256:%s)", short(claim.manifest), short(manifestSum))
		}
		return &Verified{KeyName: name, KeyID: keyID, ModuleSHA256: moduleSum, ManifestSHA256: manifestSum}, nil
	}
	return refuse(keyID, "%s", diagnose(trusted[names[0]], f, s, moduleSum))
}

// diagnose says why a signature by a trusted key id failed, by checking its
// two Ed25519 signatures separately: the signature over the module, and the
// global signature over signature || trusted comment. It only explains a
// refusal; the decision is minisign.Verify's. BLAKE2b-512 comes from the
// crypto.Hash registry, where golang.org/x/crypto/blake2b (imported by the
// minisign library) registers it.
func diagnose(key PublicKey, f *signatureFile, s Signed, moduleSum string) string {
	globalOK := ed25519.Verify(key.raw, append(f.sig[:len(f.sig):len(f.sig)], f.trustedComment...), f.globalSig[:])
	message, known := s.Module, true
	if f.alg == algED {
		if known = crypto.BLAKE2b_512.Available(); known {
			h := crypto.BLAKE2b_512.New()
			h.Write(s.Module)
			message = h.Sum(nil)
		}
	}
	if !known {
		return "signature does not verify: the module bytes or the signature were changed"
	}
	moduleOK := ed25519.Verify(key.raw, message, f.sig[:])
	switch {
	case moduleOK && !globalOK:
		return "signature does not verify: its trusted comment (or the global signature over it) was changed"
	case !moduleOK && !globalOK:
		return "signature does not verify: the signature bytes were changed (or both the module and the trusted comment were)"
	case !moduleOK && globalOK:
		// The trusted comment is authentic, so it says what was signed.
		claim, err := parseTrustedComment(f.trustedComment)
		switch {
		case err != nil:
			return "signature does not verify: the module bytes or the signature were changed"
		case claim.name != s.Name:
			return fmt.Sprintf("signature is for module %s, not %s", claim.name, s.Name)
		case claim.module != moduleSum:
			return fmt.Sprintf("the module changed since signing (signed sha256:%s, now sha256:%s)", short(claim.module), short(moduleSum))
		default:
			return "signature does not verify: the signature was changed (the module is the one that was signed)"
		}
	}
	return "signature does not verify: the module bytes or the signature were changed"
}

// signatureFile is a parsed .minisig file.
type signatureFile struct {
	alg            string // algEd or algED
	keyID          uint64
	sig            [ed25519.SignatureSize]byte
	trustedComment string
	globalSig      [ed25519.SignatureSize]byte
}

// parseSignatureFile reads the four lines of a .minisig. It is stricter than
// the library (canonical base64, nothing after the fourth line) so that
// changing any byte outside the untrusted comment is refused, not just any
// byte that matters to Ed25519.
func parseSignatureFile(b []byte) (*signatureFile, error) {
	if len(b) == 0 {
		return nil, errors.New("the file is empty")
	}
	if !utf8.Valid(b) {
		return nil, errors.New("the file is not text")
	}
	lines := strings.Split(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) != 4 {
		return nil, fmt.Errorf("%d lines, expected 4 (untrusted comment, signature, trusted comment, global signature)", len(lines))
	}
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\r")
	}
	if !strings.HasPrefix(lines[0], "untrusted comment: ") {
		return nil, errors.New(`line 1 does not start with "untrusted comment: "`)
	}
	if !strings.HasPrefix(lines[2], "trusted comment: ") {
		return nil, errors.New(`line 3 does not start with "trusted comment: "`)
	}
	sigLine, err := base64.StdEncoding.Strict().DecodeString(lines[1])
	if err != nil {
		return nil, fmt.Errorf("line 2 (the signature) is not base64: %v", err)
	}
	if len(sigLine) != sigLineSize {
		return nil, fmt.Errorf("the signature is %d bytes, expected %d (2-byte algorithm, 8-byte key id, 64-byte Ed25519 signature)", len(sigLine), sigLineSize)
	}
	global, err := base64.StdEncoding.Strict().DecodeString(lines[3])
	if err != nil {
		return nil, fmt.Errorf("line 4 (the global signature) is not base64: %v", err)
	}
	if len(global) != ed25519.SignatureSize {
		return nil, fmt.Errorf("the global signature is %d bytes, expected %d", len(global), ed25519.SignatureSize)
	}
	f := &signatureFile{
		alg:            string(sigLine[:2]),
		keyID:          binary.LittleEndian.Uint64(sigLine[2:10]),
		trustedComment: strings.TrimPrefix(lines[2], "trusted comment: "),
	}
	if f.alg != algED && f.alg != algEd {
		return nil, fmt.Errorf("unsupported signature algorithm %q (minisign signs with Ed25519: %q, or %q for legacy signatures)", f.alg, algED, algEd)
	}
	copy(f.sig[:], sigLine[10:])
	copy(f.globalSig[:], global)
	return f, nil
}

// trustedClaim is what a moat-v1 trusted comment says was signed.
type trustedClaim struct {
	name     string
	module   string // hex sha256
	manifest string // hex sha256, or "none"
}

func parseTrustedComment(c string) (trustedClaim, error) {
	fields := strings.Split(c, " ")
	if fields[0] != signatureVersion {
		if strings.HasPrefix(fields[0], "moat-v") {
			return trustedClaim{}, fmt.Errorf("signature uses format %s; this moat understands %s", abbreviate(fields[0], 16), signatureVersion)
		}
		return trustedClaim{}, fmt.Errorf("not a moat signature: its trusted comment is %q (expected %q)", abbreviate(c, 64), signatureVersion+" name=… module-sha256=… manifest-sha256=…")
	}
	bad := func(why string) (trustedClaim, error) {
		return trustedClaim{}, fmt.Errorf("malformed trusted comment %q: %s", abbreviate(c, 200), why)
	}
	if len(fields) != 4 {
		return bad("expected 4 space-separated fields")
	}
	var claim trustedClaim
	var ok bool
	if claim.name, ok = strings.CutPrefix(fields[1], "name="); !ok || claim.name == "" {
		return bad("the second field is not name=<module>")
	}
	if claim.module, ok = strings.CutPrefix(fields[2], "module-sha256="); !ok || !isSHA256Hex(claim.module) {
		return bad("the third field is not module-sha256=<64 hex digits>")
	}
	if claim.manifest, ok = strings.CutPrefix(fields[3], "manifest-sha256="); !ok || claim.manifest != "none" && !isSHA256Hex(claim.manifest) {
		return bad(`the fourth field is not manifest-sha256=<64 hex digits or "none">`)
	}
	return claim, nil
}

// checkSignedName accepts the names a trusted comment can carry: its fields
// are separated by spaces and it is one line.
func checkSignedName(name string) error {
	switch {
	case name == "":
		return errors.New("the module name is empty")
	case len(name) > maxSignedNameLen:
		return fmt.Errorf("the module name is %d bytes long: the limit is %d", len(name), maxSignedNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("the module name %q is not UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("the module name %q contains %q: a signed name cannot contain spaces or control characters", name, r)
		}
	}
	return nil
}

// keyLine returns the base64 line of a key given alone or as a whole key
// file (an "untrusted comment:" line, then the key).
func keyLine(s string) (string, error) {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	switch {
	case len(lines) == 0:
		return "", errors.New("it is empty")
	case strings.Contains(s, "\ntrusted comment: "):
		return "", errors.New("this is a signature (.minisig file), not a key")
	case len(lines) == 1 && !strings.HasPrefix(lines[0], "untrusted comment:"):
		return lines[0], nil
	case len(lines) == 2 && strings.HasPrefix(lines[0], "untrusted comment:"):
		return lines[1], nil
	case len(lines) == 1:
		return "", errors.New("it has only the comment line, the key line is missing")
	default:
		return "", fmt.Errorf("it has %d lines, a key file has 2", len(lines))
	}
}

func newPublicKey(k minisign.PublicKey) PublicKey {
	// The library keeps the raw Ed25519 key unexported; String is the
	// documented minisign encoding: algorithm, key id, key.
	b, err := base64.StdEncoding.DecodeString(k.String())
	if err != nil || len(b) != publicKeySize {
		panic("policy: minisign.PublicKey.String is not a minisign public key")
	}
	return PublicKey{key: k, raw: ed25519.PublicKey(b[10:])}
}

func keyIDString(id uint64) string { return fmt.Sprintf("%016X", id) }

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// short abbreviates a hex digest for a message; Verified has the full one.
func short(hexDigest string) string { return abbreviate(hexDigest, 12) }

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
