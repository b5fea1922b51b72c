package all_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// waitBuilding waits until e has n builds in flight.
func waitBuilding(t *testing.T, e *languages.Executor, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.Building() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d builds in flight, want %d", e.Building(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSharedBuildOwnContext: jobs asking for the same build at once share
// it, and the build runs under the executor's context, not the first
// job's. Another organization's short compile timeout or disconnect ends
// only its own wait; the job still waiting gets the build. It once took
// the first requester's deadline and cancellation: a 1 ms timeout failed
// an identical build for everyone, a disconnect gave the others a 503.
// Go builds take over a second here, so the second job surely joins the
// first's build.
func TestSharedBuildOwnContext(t *testing.T) {
	needLanguage(t, "go")
	const prog = "package main\nimport \"fmt\"\nfunc main() { fmt.Println(%q) }\n"
	long := 5 * time.Minute
	bob := policy.Principal{User: "bob", Org: "other"}
	ann := policy.Principal{User: "ann", Org: "acme"}
	type job struct {
		who     policy.Principal
		compile time.Duration
		cancel  time.Duration // cancel the job's context after this, 0 never
		status  languages.Status
		message string // in the result's message, or the error
		err     error  // the error Exec returns
	}
	cases := []struct {
		name  string
		code  string // the Go program's source (%q: a nonce)
		first job    // starts the build
		then  job    // joins it
		after *job   // runs once both are done
	}{
		{name: "first job's short timeout does not fail the build",
			first: job{who: bob, compile: 50 * time.Millisecond, status: languages.StatusTimeout, message: "compile stage: build: go stopped: compile time limit 50ms passed"},
			then:  job{who: ann, compile: long, status: languages.StatusOK}},
		{name: "first job's disconnect does not fail the build",
			first: job{who: bob, compile: long, cancel: 50 * time.Millisecond, err: context.Canceled},
			then:  job{who: ann, compile: long, status: languages.StatusOK}},
		{name: "joining job's short timeout is its own",
			first: job{who: ann, compile: long, status: languages.StatusOK},
			then:  job{who: bob, compile: 20 * time.Millisecond, status: languages.StatusTimeout, message: "compile stage: build: go stopped: compile time limit 20ms passed"}},
		{name: "joining job's disconnect is its own",
			first: job{who: ann, compile: long, status: languages.StatusOK},
			then:  job{who: bob, compile: long, cancel: 20 * time.Millisecond, err: context.Canceled}},
		{name: "a compile error is the build's, shared",
			code:  "package main\nfunc main() { undefinedFn(%q) }\n",
			first: job{who: ann, compile: long, status: languages.StatusCompileError, message: "the compiler refused the source"},
			then:  job{who: bob, compile: long, status: languages.StatusCompileError, message: "the compiler refused the source"}},
		{name: "a build every job gave up on is canceled, not cached",
			first: job{who: ann, compile: 50 * time.Millisecond, status: languages.StatusTimeout, message: "compile time limit 50ms passed"},
			then:  job{who: bob, compile: 80 * time.Millisecond, status: languages.StatusTimeout, message: "compile time limit 80ms passed"},
			after: &job{who: ann, compile: long, status: languages.StatusOK}},
	}
	e := newExecutor(t, "")
	// The Go seed (the standard library for wasip1) is built once per
	// machine, outside any job's compile timeout: build it first.
	if res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "go", Source: src("main.go", fmt.Sprintf(prog, "warm")),
		Limits: languages.ExecLimits{CompileTimeout: long}}); err != nil || res.Status != languages.StatusOK {
		t.Fatalf("warm-up: %v %+v", err, res)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if i != 0 && i != 4 {
				testenv.Slow(t, "a Go build and its compile to machine code per case; the first case and the shared compile error show the path")
			}
			code := tc.code
			if code == "" {
				code = prog
			}
			source := src("main.go", fmt.Sprintf(code, fmt.Sprintf("%s-%d-%d", t.Name(), i, time.Now().UnixNano())))
			run := func(j job) (*languages.ExecResult, error) {
				ctx := context.Background()
				if j.cancel > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(j.cancel, cancel)
				}
				return e.Exec(ctx, languages.ExecRequest{Language: "go", Source: source, Principal: j.who,
					Limits: languages.ExecLimits{CompileTimeout: j.compile}})
			}
			check := func(who string, j job, res *languages.ExecResult, err error) {
				t.Helper()
				if j.err != nil {
					if !errors.Is(err, j.err) {
						t.Errorf("%s: error %v, want %v (result %+v)", who, err, j.err, res)
					}
					return
				}
				if err != nil {
					t.Errorf("%s: %v", who, err)
					return
				}
				if res.Status != j.status || !strings.Contains(res.Message, j.message) {
					t.Errorf("%s: status %s (%q), want %s (%q); compile output %q", who, res.Status, res.Message, j.status, j.message, res.CompileOutput)
				}
				if j.status == languages.StatusOK && !strings.HasPrefix(string(res.Stdout), t.Name()) {
					t.Errorf("%s: stdout %q", who, res.Stdout)
				}
			}
			var wg sync.WaitGroup
			var firstRes *languages.ExecResult
			var firstErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				firstRes, firstErr = run(tc.first)
			}()
			waitBuilding(t, e, 1)
			thenRes, thenErr := run(tc.then)
			wg.Wait()
			check("first", tc.first, firstRes, firstErr)
			check("then", tc.then, thenRes, thenErr)
			if thenErr == nil && tc.then.status == languages.StatusOK && !thenRes.BuildCached {
				t.Errorf("then: did not join the first job's build (build_cached false)")
			}
			if tc.after != nil {
				waitBuilding(t, e, 0) // the abandoned build is gone at once
				res, err := run(*tc.after)
				check("after", *tc.after, res, err)
				if err == nil && res.BuildCached {
					t.Errorf("after: served from the cache, though no build finished")
				}
			}
			waitBuilding(t, e, 0)
		})
	}
}

// TestSharedBuildBound: a build nobody gives up on still ends at the
// executor's bound (MaxCompileTimeout), with a timeout naming it.
func TestSharedBuildBound(t *testing.T) {
	testenv.Timing(t)
	needLanguage(t, "go")
	e, err := languages.NewExecutor(languages.ExecutorConfig{Host: testHost(t), Audit: sharedAudit, BuildCacheDir: t.TempDir(), StateDir: persistentDir(t, "lang-state"),
		Limits: languages.ExecLimits{CompileTimeout: 100 * time.Millisecond}, MaxCompileTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "go",
		Source: src("main.go", fmt.Sprintf("package main\nfunc main() { println(%q) }\n", time.Now().String())),
		Limits: languages.ExecLimits{CompileTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	// The message is the executor's, or the compiler runner's when the
	// bound passed between its steps; both name the compile time limit.
	if want := "compile stage: build: go stopped: "; res.Status != languages.StatusTimeout || !strings.HasPrefix(res.Message, want) || !strings.Contains(res.Message, "compile time limit") {
		t.Fatalf("status %s %q, want timeout %q... compile time limit", res.Status, res.Message, want)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("took %s: the bound is 100ms", took)
	}
}
