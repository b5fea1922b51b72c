package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// imageLanguages are the code-execution languages the image claims: the
// ones whose runtime is WebAssembly the binary carries (JavaScript and
// TypeScript on QuickJS) or the image's toolchains hold (Python, Ruby:
// IMAGE_LANGUAGES in mk/image.mk, `toolchains install` in Containerfile),
// and the compiled ones whose compilers it carries (C, C++, Rust:
// IMAGE_COMPILER_PACKAGES; Go: IMAGE_GOROOT), which run as native jobs in
// user namespaces. /readyz of a container of the image must list exactly
// these: none missing, and none more (no shell, no native interpreter).
var imageLanguages = []string{"c", "cpp", "go", "javascript", "python", "ruby", "rust", "typescript"}

// imageToolchainLanguages are the languages `moat toolchains install`
// provisions into the image, as both build files say.
var imageToolchainLanguages = []string{"python", "ruby"}

// finalStage is the last stage of a Containerfile: what the image holds.
func finalStage(t *testing.T, file string) containerfileStage {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	stages := parseContainerfile(string(data))
	if len(stages) == 0 {
		t.Fatalf("%s: no FROM", file)
	}
	return stages[len(stages)-1]
}

// imageShape is what a final stage says of the image besides its files'
// sources: the instructions a container sees, and where each COPY lands.
func imageShape(st containerfileStage) (config []string, dests []string) {
	for _, l := range st.lines {
		f := strings.Fields(l)
		switch f[0] {
		case "COPY":
			dests = append(dests, strings.TrimSuffix(f[len(f)-1], "/"))
		default:
			config = append(config, l)
		}
	}
	slices.Sort(dests)
	return config, dests
}

// TestContainerfilesAgree holds the two ways to build the image to one
// image: deploy/Containerfile (golang and distroless, where registries
// can be reached) and deploy/Containerfile.scratch (`make image`, FROM
// scratch, from a context of this checkout and Debian's files). Same
// user, environment, port, entrypoint and command; the same places
// filled; the same interpreters provisioned by the same command.
func TestContainerfilesAgree(t *testing.T) {
	registry, scratch := finalStage(t, "Containerfile"), finalStage(t, "Containerfile.scratch")
	if scratch.from != "scratch" {
		t.Errorf("Containerfile.scratch: FROM %s, want scratch (this machine kind pulls no base image)", scratch.from)
	}
	rc, rd := imageShape(registry)
	sc, sd := imageShape(scratch)
	if !slices.Equal(rc, sc) {
		t.Errorf("the images' configurations differ:\n  Containerfile:         %q\n  Containerfile.scratch: %q", rc, sc)
	}
	// distroless gives /etc/passwd, CA roots, zoneinfo and /tmp, which
	// the scratch build copies from rootfs/ to "/" (with the compilers,
	// which the other copies to "/" from its compilers stage).
	want := slices.Clone(rd)
	if !slices.Contains(want, "") {
		want = append(want, "")
	}
	if !slices.Equal(sd, slices.Sorted(slices.Values(want))) {
		t.Errorf("the images fill different places: Containerfile copies to %q (on distroless, which has the rest of /), Containerfile.scratch to %q", rd, sd)
	}
	mk, err := os.ReadFile("../mk/image.mk")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE_LANGUAGES := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("mk/image.mk: no IMAGE_LANGUAGES := line")
	}
	if got := strings.Fields(string(m[1])); !slices.Equal(got, imageToolchainLanguages) {
		t.Errorf("mk/image.mk: IMAGE_LANGUAGES %q, want %q (what Containerfile provisions)", got, imageToolchainLanguages)
	}
	if !strings.Contains(string(mk), "$(MOAT) toolchains install --no-apt --no-warm --dir $(IMAGE_CONTEXT)/toolchains $(IMAGE_LANGUAGES)") {
		t.Error("mk/image.mk: the interpreters must come from `$(MOAT) toolchains install --no-apt --no-warm --dir $(IMAGE_CONTEXT)/toolchains $(IMAGE_LANGUAGES)`, as in Containerfile")
	}
	cf, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "toolchains install --no-apt --no-warm --dir /toolchains " + strings.Join(imageToolchainLanguages, " "); !strings.Contains(string(cf), want) {
		t.Errorf("Containerfile: want %q", want)
	}
	// The compilers: the same Debian packages, copied by the same script.
	m = regexp.MustCompile(`(?m)^IMAGE_COMPILER_PACKAGES := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("mk/image.mk: no IMAGE_COMPILER_PACKAGES := line")
	}
	pkgs := strings.Join(strings.Fields(string(m[1])), " ")
	for _, want := range []string{"apt-get install -y --no-install-recommends " + pkgs, "sh /image-packages.sh /rootfs " + pkgs, "COPY mk/image-packages.sh "} {
		if !strings.Contains(string(cf), want) {
			t.Errorf("Containerfile: want %q (the compilers of mk/image.mk's IMAGE_COMPILER_PACKAGES)", want)
		}
	}
	if !strings.Contains(string(mk), "sh mk/image-packages.sh $$ctx/rootfs $(IMAGE_COMPILER_PACKAGES)") {
		t.Error("mk/image.mk: the compilers must be copied by mk/image-packages.sh, as in Containerfile")
	}
}

// podmanEnv is what every podman command of the image test needs.
type podmanEnv struct {
	bin   string
	image string
	// global are podman's own flags: the OCI runtime to use.
	global []string
}

func (p podmanEnv) cmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, p.bin, append(slices.Clone(p.global), args...)...)
}

func (p podmanEnv) output(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	c := p.cmd(ctx, args...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// hybridCgroups reports whether this machine mounts cgroup v1 controllers
// beside a v2 hierarchy at /sys/fs/cgroup/unified (this machine kind):
// crun, Debian's podman's default runtime, refuses to start a container
// there; runc starts it.
func hybridCgroups() bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC: pure v2
		return false
	}
	return syscall.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == 0x63677270
}

// requirePodman finds podman and the image `make image` built, or skips
// (fails under MOAT_REQUIRE_TOOLS=1).
func requirePodman(t *testing.T) podmanEnv {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		testenv.Require(t, "podman is not installed (make image installs it: apt-get install podman)")
	}
	p := podmanEnv{bin: bin, image: cmpOrString(os.Getenv("MOAT_IMAGE"), "localhost/moat:dev")}
	if hybridCgroups() {
		if _, err := exec.LookPath("runc"); err != nil {
			testenv.Require(t, "this machine mounts cgroup v1 beside v2, which crun refuses: apt-get install runc (make test-tools)")
		}
		p.global = []string{"--runtime", "runc"}
	}
	if err := p.cmd(context.Background(), "image", "exists", p.image).Run(); err != nil {
		testenv.Require(t, "image "+p.image+" is not built: make image (MOAT_IMAGE names another)")
	}
	return p
}

func cmpOrString(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// deploymentRunArgs are the `podman run` flags that run a container as
// the Deployment's pod runs its container moat: its uid and gid, a
// read-only root, every capability dropped, no new privileges, the
// runtime's default seccomp profile (podman applies its own unless told
// otherwise, as the kubelet applies the runtime's for RuntimeDefault),
// its emptyDirs as size-bounded tmpfs, its environment but the database
// (the test serves from SQLite in the data emptyDir). cfgDir and
// secretDir stand for the ConfigMap's and the Secret's volumes.
func deploymentRunArgs(t *testing.T, b *bundle, cfgDir, secretDir string) []string {
	t.Helper()
	d, c := b.deployment(), b.moatContainer()
	ps := d.Spec.Template.Spec
	sc := c.SecurityContext
	uid, gid := cmpOr(sc.RunAsUser, ps.SecurityContext.RunAsUser), cmpOr(sc.RunAsGroup, ps.SecurityContext.RunAsGroup)
	args := []string{"--user", fmt.Sprintf("%d:%d", *uid, *gid)}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") {
		args = append(args, "--cap-drop=ALL")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if p := cmpOr(sc.SeccompProfile, ps.SecurityContext.SeccompProfile); p == nil || p.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("the Deployment's seccomp profile is not RuntimeDefault: the test runs the runtime's default only")
	}
	// Podman running as root raises RLIMIT_NOFILE and RLIMIT_NPROC past
	// what this machine kind's root may (it lacks CAP_SYS_RESOURCE); the
	// kubelet leaves them as the runtime's. Bounds that fit anywhere.
	args = append(args, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		switch {
		case v.ConfigMap != nil:
			args = append(args, "-v", cfgDir+":"+m.MountPath+":ro")
		case v.Secret != nil:
			args = append(args, "-v", secretDir+":"+m.MountPath+":ro")
		case v.EmptyDir != nil:
			// tmpfs-mode 1777: a tmpfs is root's, and the kubelet makes an
			// emptyDir writable by the pod's fsGroup.
			size := ""
			if v.EmptyDir.SizeLimit != nil {
				size = fmt.Sprintf(",tmpfs-size=%d", v.EmptyDir.SizeLimit.Value())
			}
			args = append(args, "--mount", "type=tmpfs,destination="+m.MountPath+",tmpfs-mode=1777"+size)
		default:
			t.Fatalf("volume %s: a kind the image test cannot stand in for", m.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.Name == "MOAT_DATABASE_URL" || e.Name == "POD_IP" || strings.HasPrefix(e.Name, "MOAT_REPLICA_"):
			// One replica on SQLite: no PostgreSQL, no peers.
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			// 32 random bytes in base64, as secret.example.yaml makes the
			// secrets key.
			k := make([]byte, 32)
			_, _ = rand.Read(k)
			args = append(args, "-e", e.Name+"="+base64.StdEncoding.EncodeToString(k))
		case e.ValueFrom == nil:
			args = append(args, "-e", e.Name+"="+e.Value)
		}
	}
	return args
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// podFiles writes the ConfigMap's and the Secret's files as the kubelet
// mounts them: the config readable by all, the Secret's files root's with
// the pod's fsGroup and defaultMode.
func podFiles(t *testing.T, b *bundle) (cfgDir, secretDir string) {
	t.Helper()
	d := b.deployment()
	ps := d.Spec.Template.Spec
	root := t.TempDir()
	cfgDir, secretDir = filepath.Join(root, "config"), filepath.Join(root, "secrets")
	for _, dir := range []string{cfgDir, secretDir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cm := b.configMap("moat-config")
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range ps.Volumes {
		if v.Secret == nil {
			continue
		}
		mode := os.FileMode(0o440)
		if v.Secret.DefaultMode != nil {
			mode = os.FileMode(*v.Secret.DefaultMode)
		}
		for _, it := range v.Secret.Items {
			p := filepath.Join(secretDir, it.Path)
			if err := os.WriteFile(p, []byte(randomHex(32)), mode); err != nil {
				t.Fatal(err)
			}
			if ps.SecurityContext.FSGroup != nil && os.Geteuid() == 0 {
				if err := os.Chown(p, 0, int(*ps.SecurityContext.FSGroup)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return cfgDir, secretDir
}

// TestImage runs the image `make image` built as the Deployment runs it
// and checks what an operator relies on: moat doctor's account of the
// kernel layers, /readyz naming what the container denies, plugins
// (compiled ones built outside and uploaded with moat deploy, the
// documented path for compiled languages; interpreted ones built inside),
// and code in every language the image claims, with the others refused
// by name.
func TestImage(t *testing.T) {
	testenv.Slow(t, "runs the OCI image under podman: a server, plugin builds, a run per language")
	p := requirePodman(t)
	b := loadBundle(t, ".")
	cfgDir, secretDir := podFiles(t, b)
	runArgs := deploymentRunArgs(t, b, cfgDir, secretDir)

	t.Run("contents", func(t *testing.T) { checkImageContents(t, p) })
	t.Run("doctor", func(t *testing.T) {
		out := p.output(t, append(append([]string{"run", "--rm"}, runArgs...), p.image, "doctor")...)
		t.Logf("moat doctor in the container:\n%s", out)
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^landlock\s+ok\b`),
			regexp.MustCompile(`(?m)^seccomp\s+ok\b.*no_new_privs set`),
			// The image has no true(1): the probe must still answer.
			regexp.MustCompile(`(?m)^(userns|netns)\s+(ok|missing)\s`),
			regexp.MustCompile(`(?m)^root\s+missing\s+why: running as uid 65532`),
			regexp.MustCompile(`(?m)^cgroup\s+missing\b`),
			// podman masks /proc: the Deployment's MOAT_NATIVE_PROC=bind,
			// reported.
			regexp.MustCompile(`(?m)^procfs\s+missing\s+why: the runtime masks /proc`),
			regexp.MustCompile(`MOAT_NATIVE_PROC=bind is set: native jobs run with the pod.s /proc bound`),
		} {
			if !want.MatchString(out) {
				t.Errorf("moat doctor's output does not match %s", want)
			}
		}
		if strings.Contains(out, "no true(1)") {
			t.Error("moat doctor reports a namespace missing for want of true(1), which the image does not carry: it must probe without it")
		}
	})

	// The server, as the pod runs it, on a loopback port.
	ctx := context.Background()
	name := "moat-imagetest-" + randomHex(4)
	out := p.output(t, append(append([]string{"run", "-d", "--name", name, "-p", "127.0.0.1::8080"}, runArgs...), p.image)...)
	id := strings.TrimSpace(out)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.cmd(ctx, "logs", "--tail", "40", id).CombinedOutput()
			t.Logf("the server's log:\n%s", logs)
		}
		_ = p.cmd(ctx, "rm", "-f", "-t", "2", id).Run()
	})
	hostPort := strings.TrimSpace(p.output(t, "port", id, "8080/tcp"))
	base := "http://" + hostPort
	ready := waitReady(t, base)

	t.Run("readyz", func(t *testing.T) {
		if ready.Confinement == nil {
			t.Fatal("/readyz says nothing of the confinement: moat serve confines itself once its port is bound")
		}
		if !slices.ContainsFunc(ready.Confinement.Applied, func(s string) bool { return strings.HasPrefix(s, "landlock") }) || !slices.Contains(ready.Confinement.Applied, "seccomp") {
			t.Errorf("/readyz: applied %q, want Landlock and seccomp (the runtime's default profile lets both through)", ready.Confinement.Applied)
		}
		// Without root, the server's own backstop cgroup is the layer a
		// container denies; /readyz must say so.
		if !slices.Contains(ready.Confinement.Missing, "cgroup") {
			t.Errorf("/readyz: missing %q, want cgroup named (no root, read-only cgroup tree)", ready.Confinement.Missing)
		}
		if !slices.Equal(ready.Languages, imageLanguages) {
			t.Errorf("/readyz: languages %q, want exactly the image's %q", ready.Languages, imageLanguages)
		}
		for _, l := range []string{"assemblyscript", "bash"} {
			if !slices.Contains(ready.Unavailable, l) {
				t.Errorf("/readyz: %s is not among the unavailable languages %q: the image carries no node and no shell", l, ready.Unavailable)
			}
		}
	})

	key := strings.TrimSpace(p.output(t, "exec", id, "/usr/local/bin/moat", "keys", "create", "--config", "/etc/moat/server.yaml", "--org", "acme", "--user", "ann", "--role", "admin"))
	if key == "" {
		t.Fatal("moat keys create in the container printed no key")
	}

	t.Run("runs", func(t *testing.T) {
		// Go's first build compiles its standard library for wasip1 into
		// the pod's seed cache (data_dir): a pod's one-time cost, paid
		// here as an operator would, by moat toolchains warm in the pod,
		// rather than inside the first run's compile limit.
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		// On a loaded machine the standard library alone can outlast the
		// warm-up's own compile limit (60 s); what it built stays in the
		// seed, so a second warm-up finishes it.
		for try := 1; ; try++ {
			start := time.Now()
			out, err := p.cmd(ctx, "exec", id, "/usr/local/bin/moat", "toolchains", "warm", "--config", "/etc/moat/server.yaml", "go").CombinedOutput()
			t.Logf("go: moat toolchains warm in the container %s (try %d): %v", time.Since(start).Round(time.Millisecond), try, err)
			if err == nil {
				break
			}
			if try == 2 {
				t.Errorf("moat toolchains warm go in the container: %v\n%s", err, out)
				break
			}
		}
		programs := map[string]RunProgram{
			"javascript": {"main.js", `console.log("hello from " + "javascript")`},
			"typescript": {"main.ts", `const who: string = "typescript"; console.log("hello from " + who)`},
			"python":     {"main.py", `print("hello from " + "python")`},
			"ruby":       {"main.rb", `puts "hello from " + "ruby"`},
			"c":          {"main.c", "#include <stdio.h>\nint main(void){printf(\"hello from %s\\n\", \"c\");return 0;}\n"},
			"cpp":        {"main.cpp", "#include <iostream>\nint main(){std::cout << \"hello from \" << \"cpp\" << std::endl;}\n"},
			"rust":       {"main.rs", "fn main() { println!(\"hello from {}\", \"rust\"); }\n"},
			"go":         {"main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from \" + \"go\") }\n"},
		}
		for _, lang := range imageLanguages {
			prog, ok := programs[lang]
			if !ok {
				t.Errorf("%s: the image claims it, the test has no program for it", lang)
				continue
			}
			start := time.Now()
			res, status := postRun(t, base, key, lang, prog)
			t.Logf("%s: first run in the container %s (compile %.0f ms)", lang, time.Since(start).Round(time.Millisecond), res.CompileTimeMS)
			if status != http.StatusOK || res.Stdout != "hello from "+lang+"\n" {
				t.Errorf("%s: HTTP %d, status %q, stdout %q, stderr %q, message %q; want hello from %s", lang, status, res.Status, res.Stdout, res.Stderr, res.Message, lang)
			}
		}
		// A language the image lacks is refused by name, never half-run.
		res, status := postRun(t, base, key, "bash", RunProgram{"main.sh", "echo hi\n"})
		if status == http.StatusOK && res.Status == "ok" {
			t.Errorf("bash ran in an image with no shell: %+v", res)
		} else {
			t.Logf("bash in the image: HTTP %d, %s %s", status, res.Status, res.Message)
		}
	})

	t.Run("hostile", func(t *testing.T) { checkHostileNative(t, p, runArgs) })
	t.Run("no-proc-setting", func(t *testing.T) { checkNoProcSetting(t, p, runArgs) })

	t.Run("plugins", func(t *testing.T) {
		moat := extractMoat(t, p)
		// hello-go is compiled outside the pod by moat build (the Go
		// toolchain is on the operator's machine, not in the image) and
		// uploaded; hello-python and hello-js go up as sources and are
		// built inside, by the interpreters the image carries.
		for _, ex := range []string{"hello-go", "hello-python", "hello-js"} {
			t.Run(ex, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), ex)
				copyDir(t, filepath.Join("..", "examples", ex), dir)
				ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, moat, "deploy", dir, "--server", base)
				cmd.Env = append(os.Environ(), "MOAT_API_KEY="+key, "MOAT_DATA="+t.TempDir())
				start := time.Now()
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("moat deploy %s: %v\n%s", ex, err, out)
				}
				t.Logf("moat deploy %s: %s (%s)", ex, strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), time.Since(start).Round(time.Millisecond))
				body, status := invoke(t, base, key, ex, "greet", "World")
				if status != http.StatusOK || !strings.Contains(body, "World") {
					t.Errorf("%s greet: HTTP %d %q, want a greeting of World", ex, status, body)
				}
			})
		}
	})
}

// checkImageContents holds the built image to Containerfile.scratch's
// promises: the user, the entrypoint, the toolchains, no shell.
func checkImageContents(t *testing.T, p podmanEnv) {
	var cfg []struct {
		Config struct {
			User       string
			Env        []string
			Entrypoint []string
			Cmd        []string
		}
		Size int64
	}
	if err := json.Unmarshal([]byte(p.output(t, "image", "inspect", p.image)), &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	c := cfg[0].Config
	t.Logf("image %s: %d MB", p.image, cfg[0].Size>>20)
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if !slices.Contains(c.Env, "MOAT_TOOLCHAINS=/opt/moat/toolchains") {
		t.Errorf("env %q lacks MOAT_TOOLCHAINS=/opt/moat/toolchains", c.Env)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/moat"}) {
		t.Errorf("entrypoint %q", c.Entrypoint)
	}
	// The files, by exporting a container of the image.
	id := strings.TrimSpace(p.output(t, "create", p.image))
	defer func() { _ = p.cmd(context.Background(), "rm", id).Run() }()
	list := exportList(t, p, id)
	for _, want := range []string{"usr/local/bin/moat", "usr/local/bin/moat-confine", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "opt/moat/toolchains/python-stdlib/",
		"usr/bin/clang-19", "usr/bin/rustc", "usr/bin/rust-lld", "usr/local/go/bin/go"} {
		if !slices.Contains(list, want) {
			t.Errorf("the image lacks /%s", want)
		}
	}
	// The compilers bring Debian's libc and their libraries; never a
	// shell, coreutils or a package manager.
	for _, f := range list {
		switch base := strings.TrimPrefix(strings.TrimPrefix(f, "usr/"), "bin/"); {
		case strings.HasPrefix(f, "bin/") || strings.HasPrefix(f, "usr/bin/"):
			if slices.Contains([]string{"sh", "bash", "dash", "busybox", "env", "cat", "ls", "apt", "apt-get", "dpkg", "perl", "python3", "node"}, base) {
				t.Errorf("the image holds /%s: it carries no shell, coreutils, interpreter or package manager", f)
			}
		}
	}
}

// exportList lists the paths in a container's filesystem (podman export).
func exportList(t *testing.T, p podmanEnv, id string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exp := p.cmd(ctx, "export", id)
	tar := exec.CommandContext(ctx, "tar", "-t")
	r, err := exp.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tar.Stdin = r
	if err := exp.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := tar.Output()
	if werr := exp.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		t.Fatalf("podman export | tar -t: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// extractMoat copies the image's own moat binary out, so the uploads go
// through the CLI of the release the image holds.
func extractMoat(t *testing.T, p podmanEnv) string {
	t.Helper()
	id := strings.TrimSpace(p.output(t, "create", p.image))
	defer func() { _ = p.cmd(context.Background(), "rm", id).Run() }()
	dst := filepath.Join(t.TempDir(), "moat")
	p.output(t, "cp", id+":/usr/local/bin/moat", dst)
	return dst
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if strings.HasSuffix(path, ".wasm") {
			return nil // built here, from the sources
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitReady polls /readyz until it answers 200 (the server loads, then
// confines itself once its port is bound).
func waitReady(t *testing.T, base string) server.ReadyJSON {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, body)
			var r server.ReadyJSON
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &r) == nil && r.Confinement != nil {
				return r
			}
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("/readyz never answered ready with the confinement: %s", last)
	return server.ReadyJSON{}
}

// RunProgram is one source file of a run.
type RunProgram struct{ Name, Content string }

func postRun(t *testing.T, base, key, lang string, prog RunProgram) (server.RunResult, int) {
	t.Helper()
	body, _ := json.Marshal(server.RunRequest{Language: lang, Files: []server.RunFile{{Name: prog.Name, Content: prog.Content}}})
	req, _ := http.NewRequest("POST", base+"/v1/runs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 3 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/runs %s: %v", lang, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var res server.RunResult
	if err := json.Unmarshal(data, &res); err != nil || res.Status == "" {
		res.Message = string(data)
	}
	return res, resp.StatusCode
}

func invoke(t *testing.T, base, key, module, action, input string) (string, int) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/modules/"+module+"/actions/"+action, strings.NewReader(input))
	req.Header.Set("Authorization", "Bearer "+key)
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("invoke %s/%s: %v", module, action, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data), resp.StatusCode
}

// checkHostileNative runs testdata/podhostile, built static here, as a
// native job in a container of the image (moat exec --native, as the
// compilers run), with the Deployment's flags and environment
// (MOAT_NATIVE_PROC=bind), and requires each attack refused with the
// errno the layers give: the pod's processes' environment, memory and
// root closed (another user namespace, Landlock), the server's files not
// in the job's root, writes outside the job dir on a read-only or
// Landlock-denied path, and a fork bomb stopped by RLIMIT_NPROC (no job
// cgroup in a pod: the run's Unavailable says so).
func checkHostileNative(t *testing.T, p podmanEnv, runArgs []string) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "podhostile")
	build := exec.Command("go", "build", "-o", bin, "./testdata/podhostile")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build podhostile: %v\n%s", err, out)
	}
	run := func(mode string) (map[string]string, string) {
		// The CLI's data directory on the /tmp emptyDir (the root is
		// read-only); 1 GiB of address space, as the compilers get: a Go
		// program reserves more than the default 256 MiB's RLIMIT_AS.
		args := append(append([]string{"run", "--rm"}, runArgs...), "-e", "MOAT_DATA=/tmp/moat-cli", "-v", dir+":/opt/hostile:ro", p.image,
			"exec", "--native", "--json", "--memory-mib", "1024", "--timeout", "20s", "--", "/opt/hostile/podhostile", mode)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := p.cmd(ctx, args...).CombinedOutput()
		var res struct {
			Status      string   `json:"status"`
			Stdout      string   `json:"stdout"`
			Stderr      string   `json:"stderr"`
			Layers      []string `json:"layers"`
			Unavailable []string `json:"unavailable"`
			Reason      string   `json:"reason"`
		}
		if i := bytes.IndexByte(out, '{'); i < 0 || json.Unmarshal(out[i:], &res) != nil {
			t.Fatalf("moat exec --native %s in the container: %v\n%s", mode, err, out)
		}
		if !slices.Contains(res.Layers, "userns") || !slices.Contains(res.Layers, "pidns") || !slices.Contains(res.Layers, "landlock") || !slices.Contains(res.Layers, "seccomp") {
			t.Errorf("%s: layers %q, want userns, pidns, landlock and seccomp at least", mode, res.Layers)
		}
		for _, want := range []string{"procfs: the pod's /proc is bound", "cgroup: not root"} {
			if !slices.ContainsFunc(res.Unavailable, func(u string) bool { return strings.HasPrefix(u, want) }) {
				t.Errorf("%s: unavailable %q does not say %q", mode, res.Unavailable, want)
			}
		}
		got := map[string]string{}
		for line := range strings.SplitSeq(strings.TrimSpace(res.Stdout), "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				got[k] = v
			}
		}
		t.Logf("%s: status %s, layers %q\n%s%s", mode, res.Status, res.Layers, res.Stdout, res.Stderr)
		return got, res.Status
	}
	denied := []string{"permission denied", "operation not permitted"}
	absent := append([]string{"no such file or directory"}, denied...)
	readOnly := append([]string{"read-only file system"}, denied...)
	expect := func(got map[string]string, what string, ok []string) {
		t.Helper()
		if v, present := got[what]; !present || !slices.Contains(ok, v) {
			t.Errorf("%s: %q, want one of %q", what, v, ok)
		}
	}
	got, _ := run("read")
	for _, f := range []string{"/proc/1/environ", "/proc/1/mem", "/proc/1/root/etc/passwd"} {
		expect(got, "read "+f, denied)
	}
	for _, f := range []string{"/etc/moat/server.yaml", "/run/secrets/moat/code-key", "/var/lib/moat"} {
		expect(got, "read "+f, absent)
	}
	got, _ = run("write")
	for _, f := range []string{"/usr/local/bin/planted", "/etc/planted", "/tmp/../usr/planted", "/opt/hostile/podhostile.planted", "/proc/sys/kernel/hostname"} {
		expect(got, "write "+f, readOnly)
	}
	expect(got, "write $HOME/own", []string{"ok"})
	got, _ = run("forkbomb")
	expect(got, "forkbomb", []string{"resource temporarily unavailable"})
	// RLIMIT_NPROC (no job cgroup in a pod) stops it: 508 and 515 in two runs under podman.
	if started, err := strconv.Atoi(got["forkbomb started"]); err != nil || started > 1024 {
		t.Errorf("the fork bomb started %q processes: RLIMIT_NPROC must stop it near the job's pids bound", got["forkbomb started"])
	}
}

// checkNoProcSetting runs the image without the Deployment's
// MOAT_NATIVE_PROC=bind: a native job cannot have a /proc of its own
// under the runtime's masks, so it is refused with the ways out named,
// and the languages whose compilers are native jobs are unavailable;
// never run with a layer fewer than the operator configured.
func checkNoProcSetting(t *testing.T, p podmanEnv, runArgs []string) {
	var args []string
	for i := 0; i < len(runArgs); i++ {
		if runArgs[i] == "-e" && i+1 < len(runArgs) && strings.HasPrefix(runArgs[i+1], "MOAT_NATIVE_PROC=") {
			i++
			continue
		}
		args = append(args, runArgs[i])
	}
	if len(args) != len(runArgs)-2 {
		t.Fatalf("the Deployment sets no MOAT_NATIVE_PROC: %q", runArgs)
	}
	run := func(cmd ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := p.cmd(ctx, append(append(append([]string{"run", "--rm"}, args...), "-e", "MOAT_DATA=/tmp/moat-cli", p.image), cmd...)...).CombinedOutput()
		return string(out), err
	}
	out, err := run("exec", "--native", "--", "/usr/bin/clang-19", "--version")
	if err == nil || !strings.Contains(out, "set MOAT_NATIVE_PROC=bind") {
		t.Errorf("a native job without MOAT_NATIVE_PROC: %v\n%s\nwant a refusal naming the setting", err, out)
	}
	out, err = run("langs", "--json")
	var langs []struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
		Missing   string `json:"missing"`
	}
	if i := strings.IndexByte(out, '['); err != nil || i < 0 || json.Unmarshal([]byte(out[i:]), &langs) != nil {
		t.Fatalf("moat langs --json: %v\n%s", err, out)
	}
	for _, l := range langs {
		switch l.Name {
		case "c", "cpp", "rust", "go":
			if l.Available || !strings.Contains(l.Missing, "MOAT_NATIVE_PROC") {
				t.Errorf("%s without MOAT_NATIVE_PROC: available %v (%s), want unavailable naming the setting", l.Name, l.Available, l.Missing)
			}
		case "python", "javascript":
			if !l.Available {
				t.Errorf("%s: unavailable (%s); a WASM language needs no native job", l.Name, l.Missing)
			}
		}
	}
}
