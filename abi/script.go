package abi

// An interpreted plugin (a script: JavaScript on QuickJS, Python on
// CPython, each a WASI command the host runs once per invocation) has no
// moat_invoke to return an error through: its result is its stdout and its
// exit status. So that an action written in a script can fail with a code
// of its own, as a compiled plugin does (an invalid_argument that reaches
// an HTTP client as 400, a not_found as 404), the script says so in both:
//
//	exit status  ScriptErrorExit
//	stdout       its last line is an Error as JSON: {"code":"invalid_argument","message":"..."}
//
// Any other non-zero exit (an uncaught exception, a syntax error, a crash),
// or this status without such a line, fails the invocation with
// CodeGuestError and the last line of stderr as its reason. The host
// gives a script's code the treatment it gives a compiled plugin's: a code
// only the host may give (confirmation_required, rate_limited,
// resource_exhausted) becomes guest_error.
//
// The status and the line together make the claim: a script that merely
// prints JSON, or merely exits with this status, fails as guest_error.

// ScriptErrorExit is the exit status of a script whose action failed with
// the Error on the last line of its stdout. 70 is EX_SOFTWARE of
// sysexits.h, and no interpreter's own status: CPython and QuickJS exit 1
// on an uncaught exception and 2 on a usage error.
const ScriptErrorExit = 70
