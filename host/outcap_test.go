package host_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
)

// TestRunOutputCapCleanExit: a command that passes its output cap is
// output_too_large however it ends afterwards: returning from _start,
// proc_exit(0), or a non-zero exit. A clean exit must never turn a
// truncated output into a success (it once did: the program ignored the
// write error and returned before the host's cancellation reached it).
func TestRunOutputCapCleanExit(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	m, err := h.Load(context.Background(), fixture(t, "hostile_outcap.wasm"), host.LoadOptions{Name: "outcap"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		mode    string
		cap     int
		code    abi.Code // "" for a clean run
		exit    uint32
		stdout  int
		stderr  int
		pattern string
	}{
		{name: "one write past the cap, then return", mode: "o", cap: 4095, code: abi.CodeOutputTooLarge, stdout: 4095, pattern: "stdout exceeded 4095 bytes"},
		{name: "one write past a small cap, then return", mode: "o", cap: 1, code: abi.CodeOutputTooLarge, stdout: 1, pattern: "stdout exceeded 1 bytes"},
		{name: "stderr past the cap, then proc_exit(0)", mode: "e", cap: 100, code: abi.CodeOutputTooLarge, stderr: 100, pattern: "stderr exceeded 100 bytes"},
		{name: "past the cap, then exit 3", mode: "n", cap: 2048, code: abi.CodeOutputTooLarge, stdout: 2048, pattern: "stdout exceeded 2048 bytes"},
		{name: "many small writes past the cap", mode: "m", cap: 1000, code: abi.CodeOutputTooLarge, stdout: 1000, pattern: "stdout exceeded 1000 bytes"},
		{name: "exactly the cap is not over it", mode: "o", cap: 4096, stdout: 4096},
		{name: "many small writes up to the cap", mode: "m", cap: 4096, stdout: 4096},
		{name: "exit 3 within the cap is an exit code", mode: "n", cap: 1 << 20, exit: 3, stdout: 4096},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			for range 20 { // the race it closes was timing-dependent
				var out, errb bytes.Buffer
				res, err := m.Run(context.Background(), host.RunRequest{Args: []string{tt.mode}, Stdout: &out, Stderr: &errb,
					Principal: ann, Limits: host.Limits{MaxOutputBytes: tt.cap}})
				if abi.CodeOf(err) != tt.code {
					t.Fatalf("code %q (%v), exit %d; want %q", abi.CodeOf(err), err, res.ExitCode, tt.code)
				}
				if tt.code != "" && !strings.Contains(err.Error(), tt.pattern) {
					t.Fatalf("error %q does not say %q", err, tt.pattern)
				}
				if tt.code == "" && res.ExitCode != tt.exit {
					t.Fatalf("exit %d, want %d", res.ExitCode, tt.exit)
				}
				if out.Len() != tt.stdout || errb.Len() != tt.stderr {
					t.Fatalf("kept %d/%d bytes of stdout/stderr, want %d/%d", out.Len(), errb.Len(), tt.stdout, tt.stderr)
				}
			}
		})
	}
}
