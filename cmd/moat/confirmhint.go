package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/host"
)

// confirmCommand is the command line that runs a confirmation: the one the
// user typed, less its input (the token holds the input it was issued for,
// and `--confirm` with an input is refused) and any earlier --confirm,
// plus --confirm TOKEN. Telling the user to "run the same command with
// --confirm" sent them into that refusal: the hint names the exact command
// instead, quoted for a POSIX shell.
func confirmCommand(argv0 string, args []string, token string) string {
	out := []string{argv0}
	var rest []string // from "--" on: arguments of the command, not moat's
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = args[i:]
			break
		}
		name, _, hasValue := strings.Cut(a, "=")
		switch name {
		case "--input", "--input-file", "--confirm":
			if !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		out = append(out, a)
	}
	out = append(append(out, "--confirm", token), rest...)
	for i, a := range out {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// characters no shell gives a meaning.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// confirmHint is the line moat prints after a confirmation_required
// refusal.
func confirmHint(args []string, c *host.ConfirmationRequest) string {
	argv0 := "moat"
	if len(os.Args) > 0 && os.Args[0] != "" {
		argv0 = os.Args[0]
		if !strings.ContainsRune(argv0, '/') {
			argv0 = filepath.Base(argv0) // found on $PATH: the name works again
		}
	}
	return "moat: to " + c.Summary + ", run (single use; expires at " + c.ExpiresAt.Local().Format("15:04:05") + "):\n  " +
		termSafe(confirmCommand(argv0, args, c.Token))
}
