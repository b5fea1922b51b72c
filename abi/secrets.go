package abi

import "fmt"

// Secrets are the operator's, never a guest's: a guest cannot read one
// through any op. They are named here because two sides must agree on
// the names: a profile's http grant writes ${secret:NAME} into a header
// it injects (package policy), and the store keeps the encrypted value
// under NAME per organization (package host/store). abi is the one
// package both import.
const (
	// MaxSecretNameBytes bounds a secret's name.
	MaxSecretNameBytes = 64
	// MinSecretBytes and MaxSecretBytes bound a secret's value. A value
	// is scrubbed from what a server sends back, replaced by
	// SecretPlaceholder: a value shorter than the placeholder would make
	// a reply grow, and one of a few bytes would turn every occurrence
	// of a common string into the placeholder (and is guessed anyway).
	MinSecretBytes = 8
	MaxSecretBytes = 8 << 10
	// SecretPlaceholder is what replaces a secret's value wherever the
	// host finds it in what goes back to a guest.
	SecretPlaceholder = "[secret]"
)

// CheckSecretName reports whether name can name a secret: 1 to
// MaxSecretNameBytes characters a-z A-Z 0-9 . _ -, starting with a letter
// or a digit, so that it reads the same in a profile, on a command line,
// in a URL path and in the audit trail.
func CheckSecretName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a secret needs a name, like github")
	case len(name) > MaxSecretNameBytes:
		return fmt.Errorf("secret name is %d bytes; the limit is %d", len(name), MaxSecretNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("secret name %q: use 1-%d characters a-z A-Z 0-9 . _ - starting with a letter or a digit, like github or openai.key", clipName(name), MaxSecretNameBytes)
		}
	}
	return nil
}

// CheckSecretValue reports whether value can be a secret: MinSecretBytes
// to MaxSecretBytes of text that a header may carry (no CR, LF, NUL or
// other control character but tab), since a secret is injected into
// request headers. Its error never quotes the value.
func CheckSecretValue(value []byte) error {
	switch {
	case len(value) < MinSecretBytes:
		return fmt.Errorf("the secret is %d bytes; the least is %d (a shorter one is guessed, and scrubbing it from replies would mangle them)", len(value), MinSecretBytes)
	case len(value) > MaxSecretBytes:
		return fmt.Errorf("the secret is %d bytes; the limit is %d", len(value), MaxSecretBytes)
	}
	for i, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("the secret has a control byte (0x%02x) at offset %d; a secret is injected into HTTP headers, which cannot carry it (a trailing newline from a file or echo is the usual cause)", c, i)
		}
	}
	return nil
}

func clipName(s string) string {
	if len(s) > MaxSecretNameBytes {
		return s[:MaxSecretNameBytes] + "…"
	}
	return s
}
