package host_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// TestScriptErrorCode: a script fails its action with a code of its own
// only with both halves of the contract (abi/script.go): exit status
// abi.ScriptErrorExit and an abi.Error on the last line of stdout. A code
// only the host gives stays guest_error; so does every other failure,
// with the last line of stderr as its reason.
func TestScriptErrorCode(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: scripted\nversion: 1.0.0\nactions: [{name: act}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/gocmd", false),
		host.LoadOptions{Name: "scripted", Manifest: mf, Script: &host.Script{Args: []string{"script"}}})
	if err != nil {
		t.Fatal(err)
	}
	status := func(n int) string { return strconv.Itoa(n) + "\n" }
	tests := []struct {
		name, input string
		code        abi.Code
		reason      string // a substring of the error's reason ("" with code "": the output)
	}{
		{"success", status(0) + "out\n", "", "out"},
		{"a code of its own", status(abi.ScriptErrorExit) + `{"code":"invalid_argument","message":"want a title"}` + "\n", abi.CodeInvalidArgument, "want a title"},
		{"the last line counts", status(abi.ScriptErrorExit) + "printed first\n" + `{"code":"not_found","message":"no note n1"}`, abi.CodeNotFound, "no note n1"},
		{"a conflict", status(abi.ScriptErrorExit) + `{"code":"conflict","message":"stale"}`, abi.CodeConflict, "stale"},
		{"a host-only code", status(abi.ScriptErrorExit) + `{"code":"rate_limited","message":"retry"}`, abi.CodeGuestError, "only the host gives"},
		{"the status without the line", status(abi.ScriptErrorExit) + "not JSON\n", abi.CodeGuestError, "exited with status 70: script action act exits 70"},
		{"a line without a code", status(abi.ScriptErrorExit) + `{"message":"no code"}`, abi.CodeGuestError, "exited with status 70"},
		{"the line without the status", status(1) + `{"code":"invalid_argument","message":"x"}`, abi.CodeGuestError, "exited with status 1"},
		{"a crash", status(2) + "", abi.CodeGuestError, "exited with status 2: script action act exits 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := m.Invoke(context.Background(), host.Request{Action: "act", Input: []byte(tt.input), Principal: ann})
			if tt.code == "" {
				if err != nil || string(res.Output) != tt.reason {
					t.Fatalf("Invoke = %q, %v; want %q", res.Output, err, tt.reason)
				}
				return
			}
			if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("Invoke error = %v; want code %s with %q", err, tt.code, tt.reason)
			}
		})
	}
}
