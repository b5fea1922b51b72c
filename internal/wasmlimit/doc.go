// Package wasmlimit holds the limit mechanisms every wazero host in moat
// shares: the host package's plugins and commands, host/extism's plug-ins
// and the Ruby driver's reactor. They are the sandbox's limits on what a
// guest may make the host hold, so there is one copy of each: a fix made
// here reaches every runtime.
//
//   - Allocator backs an instance's linear memories and refuses to grow
//     them past a limit the host may change between invocations,
//     recording that the guest hit it (the call is then memory_limit,
//     whatever the guest printed on its way down) and the peak it reached.
//   - OutputCap makes the writers that cap a run's stdout and stderr and
//     stop the run past the cap.
//   - LineWriter sends what a plugin writes to WASI stdout or stderr to the
//     invocation's log, within a byte budget, and keeps what an error
//     message needs (the first panic or fatal error line, else the last).
//   - NewRuntimeConfig is the wazero runtime configuration they all use.
//
// The package is internal, like wazero's own shared code: the public API
// is the host package's, which wraps these.
package wasmlimit
