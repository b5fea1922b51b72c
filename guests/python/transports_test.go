//go:build linux

package python_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	python "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/python" // the python language, for the script transport
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestMain lets the test binary be the confinement wrapper and launcher
// of the native workers TestSDKTransports starts.
func TestMain(m *testing.M) {
	kernel.ConfineMain()
	native.LauncherMain()
	os.Exit(m.Run())
}

// sdkProfile grants the test plugin exactly what its manifest asks for.
const sdkProfile = `
name: sdk-test
default:
  capabilities: {db: [items], knowledge: [docs], tasks: true, kv: true}
  limits: {memory: 128MiB, timeout: 60s}
`

// sdkHost is a host enforcing sdkProfile, its wazero cache beside the
// toolchains (so CPython compiles once across test runs, as in the
// languages' tests).
func sdkHost(t *testing.T) *host.Host {
	t.Helper()
	p, err := policy.ParseProfile("sdk-test.yaml", []byte(sdkProfile))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	if d := toolchains.Dir(); d != "" {
		cache = filepath.Join(d, "cache", "wazero")
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: cache, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// sdkPlugin reads testdata/sdkplugin: its main.py and its manifest named
// name, with extra YAML appended.
func sdkPlugin(t *testing.T, name, extra string) ([]byte, *policy.Manifest) {
	t.Helper()
	src, err := os.ReadFile("testdata/sdkplugin/main.py")
	if err != nil {
		t.Fatal(err)
	}
	mfb, err := os.ReadFile("testdata/sdkplugin/moat.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := policy.ParseManifest("moat.yaml", append([]byte("name: "+name+"\n"+extra), mfb...))
	if err != nil {
		t.Fatal(err)
	}
	return src, mf
}

// loadScript loads the plugin as moat run and moat serve load a script
// plugin: CPython WASI serving the manifest's actions, ops on the device
// file.
func loadScript(t *testing.T, h *host.Host) *host.Module {
	src, mf := sdkPlugin(t, "sdk-script", "")
	return loadScriptOf(t, h, src, mf)
}

func loadScriptOf(t *testing.T, h *host.Host, src []byte, mf *policy.Manifest) *host.Module {
	l, err := languages.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := languages.PluginSource(l, map[string][]byte{"main.py": src})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(context.Background(), l, ps, t.TempDir(), "")
	if errors.Is(err, toolchains.ErrMissing) {
		testenv.Require(t, err.Error()+" (make toolchains)")
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), sp.WASM, host.LoadOptions{Manifest: mf, Script: sp.Script})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// loadNative loads the plugin as a native plugin: Debian's python3 as a
// confined worker, ops on the pipe.
func loadNative(t *testing.T, h *host.Host) *host.Module {
	testenv.Require(t, testenv.NativePython(false))
	src, mf := sdkPlugin(t, "sdk-native", "kind: native\ncommand: [python3, main.py]\n")
	dir, err := os.MkdirTemp("", "moat-sdk-native-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.py"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := python.WriteSDK(filepath.Join(dir, "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), nil, host.LoadOptions{Manifest: mf, Native: &host.Native{Dir: dir, Env: env, Source: src}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// TestSDKTransports runs every wrapper of moat.py (db, knowledge, tasks,
// call) and its error paths through a real host and store, on both
// transports, with one table: what a Python plugin sees is the same
// whichever way moat runs it, and a handler's MoatError reaches the
// caller with its code.
func TestSDKTransports(t *testing.T) {
	h := sdkHost(t)
	ann := policy.Principal{User: "ann", Org: "acme"}
	tests := []struct {
		action, input string
		who           policy.Principal // the caller; ann when empty
		cid           string           // the request's correlation id
		want          string           // the output as JSON (compared as values), or
		raw           string           // the output exactly, or
		code          abi.Code         // the failure's code, with
		reason        string           // a substring of its reason
	}{
		{action: "db", want: `{"v1":1,"v2":2,"id":true,"version":1,"owner":"ann","name":"apple","when":"2026-01-02T03:04:05.678Z","created":true,
			"first":["beet"],"second":["apple"],"more":true,"count":2,"all":3,"stale":"conflict","invalid":"invalid_argument",
			"deleted":[true,false],"gone":true,"after":{"name":"apple","when":"2026-01-02T03:04:05.678Z","n":4}}`},
		{action: "knowledge", want: `{"replaced":[false,true],"hits":["a"],"meta":{"lang":"en","n":1},"snippet":"The quick brown fox jumps over the dog","scored":true,
			"dogs":["a","b"],"filtered":0,"syntax":1,"deleted":[true,false],"after":["b"]}`},
		{action: "tasks", want: `{"existing":[false,true,true],"queued":["queued",0,3,true],"cancel":[true,"cancelled"],"after":"cancelled",
			"later":["queued",5],"missing":"not_found","unknown":"invalid_argument","cancelled_later":true}`},
		{action: "local", want: `{"nan":"invalid_argument","naive":"invalid_argument","bytes":"invalid_argument","where":"invalid_argument","delay":"invalid_argument","op":"invalid_argument","items":0}`},
		{action: "call", want: `{"count":{"count":2},"denied":"denied"}`},
		{action: "fail", input: "invalid_argument", code: abi.CodeInvalidArgument, reason: "failing as asked"},
		{action: "fail", input: "conflict", code: abi.CodeConflict, reason: "failing as asked"},
		{action: "fail", input: "not_found", code: abi.CodeNotFound, reason: "failing as asked"},
		{action: "fail", input: "rate_limited", code: abi.CodeGuestError, reason: "only the host gives"},
		{action: "boom", code: abi.CodeGuestError, reason: "ZeroDivisionError: division by zero"},
		{action: "kv", want: `{"text":"tëxt","bytes":[0,255,10,34],"array":"ab","empty":true,"sub":"sub","missing":null,"big":true,
			"long_key_get":"too_large","long_key_put":"too_large","bytes_key":"invalid_argument","log":"invalid_argument"}`},
		// moat.next hands each input over as it is: text with and
		// without escapes in its JSON, bytes that are not UTF-8, none.
		{action: "input", input: "World", cid: "c-1", want: `{"hex":"576f726c64","action":"input","cid":"c-1"}`},
		{action: "input", input: "a\"b\\c\n<&>\u2028é", want: `{"hex":"` + hex.EncodeToString([]byte("a\"b\\c\n<&>\u2028é")) + `","action":"input","cid":""}`},
		{action: "input", input: "\xff\x00", cid: "c\"2", want: `{"hex":"ff00","action":"input","cid":"c\"2"}`},
		{action: "input", want: `{"hex":"","action":"input","cid":""}`},
		{action: "output", input: "text", raw: "héllo \"wörld\"\n\u2028"},
		{action: "output", input: "bytes", raw: "\x00\xff"},
		{action: "output", input: "none", raw: ""},
		{action: "output", input: "json", raw: `{"a":[1,"\u00e9"]}`},
		{action: "output", input: "surrogate", code: abi.CodeGuestError, reason: "UnicodeEncodeError"},
		// moat.caller: the invocation's principal, on either transport,
		// anew on every call of the one worker or instance.
		{action: "caller", input: `{"user":"mallory"}`, cid: "c-ann", want: `{"user":"ann","org":"acme","roles":[],"cid":"c-ann","admin":false,"raw_user":"ann","raw_org":"acme"}`},
		{action: "caller", who: policy.Principal{User: "bob", Org: "acme", Roles: []string{"admin"}}, cid: "c-bob",
			want: `{"user":"bob","org":"acme","roles":["admin"],"cid":"c-bob","admin":true,"raw_user":"bob","raw_org":"acme"}`},
		{action: "caller", cid: "c-ann-2", want: `{"user":"ann","org":"acme","roles":[],"cid":"c-ann-2","admin":false,"raw_user":"ann","raw_org":"acme"}`},
	}
	for _, transport := range []struct {
		name string
		load func(*testing.T, *host.Host) *host.Module
	}{{"device file", loadScript}, {"pipe", loadNative}} {
		t.Run(transport.name, func(t *testing.T) {
			m := transport.load(t, h)
			for _, tt := range tests {
				who := ann
				if tt.who.User != "" {
					who = tt.who
				}
				res, err := m.Invoke(context.Background(), host.Request{Action: tt.action, Input: []byte(tt.input), Principal: who, CorrelationID: tt.cid})
				if tt.code != "" {
					var he *host.Error
					if !errors.As(err, &he) || he.Code != tt.code || !strings.Contains(he.Reason, tt.reason) {
						t.Errorf("%s %q = %q, %v; want code %s with %q", tt.action, tt.input, res.Output, err, tt.code, tt.reason)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", tt.action, err)
					continue
				}
				if tt.want == "" {
					if string(res.Output) != tt.raw {
						t.Errorf("%s %q = %q, want %q", tt.action, tt.input, res.Output, tt.raw)
					}
					continue
				}
				var got, want any
				if err := json.Unmarshal(res.Output, &got); err != nil {
					t.Errorf("%s: output %q: %v", tt.action, res.Output, err)
					continue
				}
				if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s:\n got %s\nwant %s", tt.action, res.Output, tt.want)
				}
			}
		})
	}
}

// TestSDKPlainScriptCode: a plain script (no handlers, no serve()) run as
// a plugin's action by the WASM CPython fails with the code of the
// MoatError it lets escape: kv without a grant is denied, as from Go.
func TestSDKPlainScriptCode(t *testing.T) {
	h := sdkHost(t)
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: sdk-plain\nversion: 1.0.0\nlanguage: python\nactions: [{name: read}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := loadScriptOf(t, h, []byte("import moat\nprint(moat.kv.get_str('count'))\n"), mf)
	_, err = m.Invoke(context.Background(), host.Request{Action: "read", Principal: policy.Principal{User: "ann", Org: "acme"}})
	if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "kv") {
		t.Fatalf("a plain script's escaped MoatError: %v; want denied naming kv", err)
	}
}
