// Command moat is the one binary of the moat sandbox host: it runs
// WebAssembly plugins and commands, inspects modules, and (as the project
// grows) serves the HTTP API. It wires packages together and holds no logic
// of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
	_ "github.com/moat-sandbox/moat/host/store/backends" // PostgreSQL for database_url / MOAT_DATABASE_URL
	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// Exit statuses of moat itself. A WASI command's own exit code passes
// through unchanged.
const (
	exitFailure = 1   // the invocation failed (trap, guest error, bad module, ...)
	exitUsage   = 2   // bad flags or arguments
	exitDenied  = 3   // policy refused it (roles, grants, signature, token)
	exitConfirm = 4   // the action needs a confirmation; the token is on stderr
	exitTimeout = 124 // the deadline passed (as timeout(1))
	exitMemory  = 125 // the guest hit its memory limit
)

func main() {
	// A native child is this binary re-executed with MOAT_CONFINE set: it
	// confines itself and execs the target, and never returns here.
	kernel.ConfineMain()
	// A launcher is this binary started by a host before it confined
	// itself: it runs native jobs on the host's behalf.
	native.LauncherMain()
	// A backstop watcher is this binary started by a host before it
	// confined itself: it reports the host's death at its memory ceiling.
	backstopWatchMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) (code int) {
	defer func() {
		// Never a Go stack trace for a user: one line, and a request to
		// report it, since reaching here is a moat bug.
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "moat: internal error: %v (please report this)\n", r)
			code = exitFailure
		}
	}()
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var exit exitError
	if errors.As(err, &exit) {
		return exit.code
	}
	fmt.Fprintf(os.Stderr, "moat: %s\n", oneLine(err))
	var he *host.Error
	if errors.As(err, &he) && he.Confirmation != nil {
		fmt.Fprintln(os.Stderr, confirmHint(args, he.Confirmation))
	}
	return exitStatus(err)
}

// exitStatus is moat's exit status for err: its code's (abi.CodeOf,
// whatever the type that carries it), or for an error without a code,
// usage or failure.
func exitStatus(err error) int {
	switch abi.CodeOf(err) {
	case "":
		var ue usageError
		if errors.As(err, &ue) || isCobraUsage(err) || plugintree.IsError(err) {
			return exitUsage // a link or special file in a plugin's tree: the server's 400
		}
		return exitFailure
	case abi.CodeTimeout:
		return exitTimeout
	case abi.CodeMemoryLimit:
		return exitMemory
	case abi.CodeInvalidArgument:
		return exitUsage
	case abi.CodeDenied:
		return exitDenied
	case abi.CodeConfirmationRequired:
		return exitConfirm
	default:
		return exitFailure
	}
}

// exitError carries a WASI command's exit code out of cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in the command line.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "invalid argument", "flag needs an argument", "accepts at most"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// oneLine is the first line of err, escaped for the terminal (termSafe):
// an error may quote what a guest wrote (a plug-in's error message).
func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return termSafe(s)
}
