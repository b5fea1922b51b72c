package all_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// Issue 27 (14, 15): a compile killed at its limit is dead, and its cgroup
// gone in every hierarchy, by the time Exec reports the timeout. Exec once
// reported as soon as the job's wait ended, while the shared build it had
// canceled was still being killed: moat exec then exited between the
// freeze and the thaw of the compiler's cgroup, which left the compiler
// frozen (state D, its memory held) until someone killed it by hand.

// forkBuild is a language whose "compiler" is a shell that starts
// children that start children and sleep: clang's driver and cc1, go
// build's compile and link, without the toolchains.
type forkBuild struct{}

func (forkBuild) Info() languages.Info {
	return languages.Info{Name: "moat-test-forkbuild", Path: languages.PathCompiled, Extensions: []string{".fb"}}
}

func (forkBuild) Validate(languages.Source, languages.ValidationProfile) []languages.Violation {
	return nil
}

func (forkBuild) Build(ctx context.Context, env languages.BuildEnv, _ languages.Source) (*languages.Artifact, error) {
	_, err := languages.RunTool(ctx, env, languages.Tool{
		Command:   []string{"sh", "-c", `for i in 1 2 3 4 5 6 7 8; do (sleep 300 & sleep 300) & done; sleep 300`},
		ExtraExec: []string{"/usr/bin/sleep"},
	})
	if err == nil {
		err = errors.New("the fork build ended")
	}
	return nil, err
}

func init() { languages.Register(forkBuild{}) }

// cppBomb expands to 2^32 tokens: the preprocessor runs until killed.
func cppBomb(nonce string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "/* %s */\n#define A0 x x\n", nonce)
	for i := 1; i <= 31; i++ {
		fmt.Fprintf(&b, "#define A%d A%d A%d\n", i, i-1, i-1)
	}
	b.WriteString("int main(void) { A31; return 0; }\n")
	return b.String()
}

// ownJobs lists the processes and cgroup directories of this test
// binary's jobs (their names carry its pid and start time): another moat
// on the machine may have jobs running, which are not counted.
func ownJobs() (procs []string, dirs []string) {
	tag := kernel.OwnJobCgroupTag()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err == nil && strings.Contains(string(b), "/"+kernel.CgroupParent+"/job-"+tag) {
			st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			procs = append(procs, strings.TrimSpace(string(st)))
		}
	}
	return procs, kernel.JobCgroupDirs("job-" + tag)
}

func TestCompileKilledAtLimitLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Require(t, "needs root: job cgroups (CI runs as root)")
	}
	e := newExecutor(t, "")
	cases := []struct {
		name    string
		lang    string
		source  string
		compile time.Duration
		cancel  time.Duration // the caller goes away (a signal to moat exec) after this
	}{
		{"fork-build-at-compile-timeout", "moat-test-forkbuild", "x", 600 * time.Millisecond, 0},
		{"fork-build-caller-gone", "moat-test-forkbuild", "y", time.Minute, 500 * time.Millisecond},
		{"c-preprocessor-bomb-at-compile-timeout", "c", "", 3 * time.Second, 0},
		{"c-preprocessor-bomb-caller-gone", "c", "", time.Minute, 2 * time.Second},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.lang == "c" {
				needLanguage(t, "c")
			}
			for run := range 3 {
				name, code := "main.fb", c.source+strconv.Itoa(run)
				if c.lang == "c" {
					name, code = "main.c", cppBomb(fmt.Sprintf("%d-%d-%d", i, run, time.Now().UnixNano()))
				}
				ctx, cancel := context.WithCancel(context.Background())
				if c.cancel > 0 {
					time.AfterFunc(c.cancel, cancel)
				}
				begun := time.Now()
				res, err := e.Exec(ctx, languages.ExecRequest{Language: c.lang, Source: src(name, code),
					Limits: languages.ExecLimits{CompileTimeout: c.compile}})
				cancel()
				took := time.Since(begun)
				switch {
				case c.cancel > 0:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("run %d: %v %+v: want context.Canceled", run, err, res)
					}
				case err != nil:
					t.Errorf("run %d: %v", run, err)
				case res.Status != languages.StatusTimeout:
					t.Errorf("run %d: status %s (%s): want %s", run, res.Status, res.Message, languages.StatusTimeout)
				}
				// At once: nothing may be left when Exec returns.
				if procs, dirs := ownJobs(); len(procs) > 0 || len(dirs) > 0 {
					t.Errorf("run %d (%s): left when Exec returned: processes %q, cgroup directories %v", run, took, procs, dirs)
				}
				if e.Building() != 0 {
					t.Errorf("run %d: %d builds still in flight", run, e.Building())
				}
			}
		})
	}
}
