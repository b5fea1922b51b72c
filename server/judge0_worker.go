package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// judge0Worker runs the submissions of the store's queue (tasks of origin
// judge0Origin), on every replica that serves the Judge0 API: a claim
// holds a submission for one replica, and a replica that dies lets its
// lease lapse, so another claims it again. It is not the module task
// runner (host/tasks), which invokes a module's action: a submission is a
// code-execution job, run by the executor as its submitter.
type judge0Worker struct {
	wake chan struct{}
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	waiters map[string]chan struct{} // by token: closed when this replica finishes it
}

const (
	judge0Lease = 30 * time.Second
	judge0Poll  = 500 * time.Millisecond // for submissions other replicas stored
)

// startJudge0 starts the worker; Close stops it, and a submission in
// flight goes back to the queue when its lease lapses.
func (s *Server) startJudge0() {
	if !s.cfg.Judge0.Enabled || s.exec == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &judge0Worker{wake: make(chan struct{}, 1), stop: stop, done: make(chan struct{}), waiters: map[string]chan struct{}{}}
	s.judge0 = w
	go func() {
		defer close(w.done)
		s.judge0Loop(ctx, w)
	}()
}

func (s *Server) stopJudge0() {
	if s.judge0 != nil {
		s.judge0.stop()
		<-s.judge0.done
	}
}

// judge0Wake tells this replica's worker a submission was stored.
func (s *Server) judge0Wake() {
	if s.judge0 == nil {
		return
	}
	select {
	case s.judge0.wake <- struct{}{}:
	default:
	}
}

// judge0Done is a channel closed when this replica finishes the
// submission id (wait=true); a submission another replica runs is seen
// by polling.
func (s *Server) judge0Done(id string) <-chan struct{} {
	if s.judge0 == nil {
		return nil
	}
	w := s.judge0
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.waiters[id]
	if !ok {
		ch = make(chan struct{})
		w.waiters[id] = ch
	}
	return ch
}

// judge0Forget drops the channel of a wait that ended without this
// replica finishing the submission (another did, or the wait timed out).
func (s *Server) judge0Forget(id string) {
	if s.judge0 != nil {
		s.judge0.mu.Lock()
		delete(s.judge0.waiters, id)
		s.judge0.mu.Unlock()
	}
}

func (w *judge0Worker) finished(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.waiters[id]; ok {
		close(ch)
		delete(w.waiters, id)
	}
}

func (s *Server) judge0Loop(ctx context.Context, w *judge0Worker) {
	n := s.cfg.Judge0.Concurrency
	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(judge0Poll)
	defer tick.Stop()
	for {
		free := n - len(slots)
		if free > 0 {
			claimed, err := s.store.TaskClaimOrigin(ctx, judge0Origin, time.Now(), judge0Lease, free)
			if err != nil && ctx.Err() == nil {
				s.log.Error("judge0: claiming submissions", "err", err)
			}
			for i := range claimed {
				t := claimed[i]
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-slots; wg.Done() }()
					s.judge0Run(ctx, &t)
					w.finished(t.ID)
					select { // a slot is free: look again at once
					case w.wake <- struct{}{}:
					default:
					}
				}()
			}
			if len(claimed) == free {
				continue // there may be more
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tick.C:
		}
	}
}

// judge0Run runs one claimed submission as its submitter and stores its
// outcome. A failure of moat's own (no run slot, the executor failing)
// is retried after a backoff; the last attempt's failure is the
// submission's Internal Error.
func (s *Server) judge0Run(ctx context.Context, t *store.Task) {
	var job judge0Job
	if err := json.Unmarshal(t.Input, &job); err != nil {
		s.store.TaskFail(context.WithoutCancel(ctx), t, string(abi.CodeInternal), "the stored submission is unreadable", true, time.Time{})
		return
	}
	p := policy.Principal{User: t.User, Org: t.Org, Roles: t.Roles}
	release, refusal := s.execs.acquire(ctx, t.Org)
	if refusal != nil {
		// No run slot (or shutting down): back to the queue, the attempt
		// not counted.
		s.store.TaskRelease(context.WithoutCancel(ctx), t, time.Now().Add(time.Second))
		return
	}
	defer release()
	// The lease is extended while the job runs, so that only a replica
	// that died lets it lapse.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tick := time.NewTicker(judge0Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
				if err := s.store.TaskExtend(rctx, t, time.Now().Add(judge0Lease)); err != nil && rctx.Err() == nil {
					cancel() // the claim is lost: another replica runs it
				}
			}
		}
	}()
	oc, err := s.judge0Execute(rctx, p, t.CorrelationID, &job)
	bctx := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		// Shutting down: the submission goes back to the queue, its
		// attempt not counted, for this replica after its restart or
		// another now.
		s.store.TaskRelease(bctx, t, time.Now())
		return
	}
	if err != nil {
		s.log.Warn("judge0: a submission's run failed", "token", t.ID, "org", t.Org, "err", err)
		retry := time.Now().Add(time.Duration(t.Attempts) * 2 * time.Second)
		// The reason (which may name the host's paths) stays in the log;
		// the submitter reads that moat failed, as Judge0's Internal Error.
		s.store.TaskFail(bctx, t, string(abi.CodeUnavailable), "moat could not run the submission; the server log has the reason", false, retry)
		return
	}
	res, _ := json.Marshal(fitOutcome(oc))
	if err := s.store.TaskSucceed(bctx, t, res); err != nil {
		if !errors.Is(err, store.ErrTaskClaimLost) {
			s.log.Error("judge0: storing a submission's result", "token", t.ID, "err", err)
		}
		return
	}
	if job.CallbackURL != "" {
		s.judge0Callback(ctx, t.ID, t.Org, job.CallbackURL)
	}
}

// judge0Execute runs a job and judges it.
func (s *Server) judge0Execute(ctx context.Context, p policy.Principal, corr string, job *judge0Job) (*judge0Outcome, error) {
	src := languages.Source{Main: job.SourceName, Files: append([]languages.File{{Name: job.SourceName, Content: job.Source}}, job.Files...)}
	args := strings.Fields(job.Args)
	// additional_files are sources too (a native run, or a program that
	// reads them beside its source, finds them there) and files of the
	// working directory, where Judge0 unpacks them, for a WASM run.
	req := languages.ExecRequest{Language: job.Language, Source: src, Stdin: job.Stdin, Args: args, Limits: job.Limits,
		Principal: p, CorrelationID: corr, WorkFiles: job.Files}
	if job.Tests == nil {
		res, err := s.execJob(ctx, req)
		if err != nil {
			return nil, err
		}
		var exp *string
		if job.HasExpected {
			e := string(job.Expected)
			exp = &e
		}
		oc := judge0Judge(res, exp)
		if job.Redirect {
			oc.Stdout, oc.Stderr = append(oc.Stdout, oc.Stderr...), nil
		}
		return oc, nil
	}
	// The tests extension: one build (the cache's), a run per test.
	var first *judge0Outcome
	var tests []judge0TestOutcome
	stop := false
	for _, tc := range job.Tests {
		if stop {
			tests = append(tests, judge0TestOutcome{StatusID: j0Internal, Message: "not run: an earlier test failed (stop_on_failure)"})
			continue
		}
		r := req
		r.Stdin = []byte(tc.Stdin)
		if tc.Args != nil {
			r.Args = tc.Args
		}
		res, err := s.execJob(ctx, r)
		if err != nil {
			return nil, err
		}
		oc := judge0Judge(res, tc.ExpectedOutput)
		if !oc.Ran {
			return oc, nil // it did not build: no test runs
		}
		tests = append(tests, judge0TestOutcome{StatusID: oc.StatusID, Stdout: oc.Stdout, Stderr: oc.Stderr, Message: oc.Message,
			Time: oc.Time, MemoryKB: oc.MemoryKB, ExitCode: *oc.ExitCode})
		if oc.StatusID != j0Accepted {
			if first == nil || first.StatusID == j0Accepted {
				first = oc
			}
			stop = job.StopOnFailure
		} else if first == nil {
			first = oc
		}
	}
	// The submission's status is its first failing test's, or Accepted.
	out := *first
	out.Tests = tests
	out.Time, out.WallTime, out.MemoryKB = 0, 0, 0
	for _, t := range tests {
		out.Time += t.Time
		out.MemoryKB = max(out.MemoryKB, t.MemoryKB)
	}
	out.WallTime = out.Time
	return &out, nil
}

// judge0Judge maps a result onto Judge0's statuses, as isolate_job.rb's
// determine_status does: the limits first, then a signal, then a
// non-zero exit, then the output against the expectation (stripped as
// Judge0 strips it). A WASM run has no signals; its traps take the
// status of the signal a native program would have got: an access out of
// its memory or the call stack exhausted SIGSEGV, a division by zero
// SIGFPE, an unreachable (abort) SIGABRT — but a Rust panic's NZEC, as
// natively.
func judge0Judge(res *languages.ExecResult, expected *string) *judge0Outcome {
	secs := res.RunTime.Seconds()
	exit := res.ExitCode
	oc := &judge0Outcome{Stdout: res.Stdout, Stderr: res.Stderr, CompileOutput: []byte(res.CompileOutput),
		Time: secs, WallTime: secs, MemoryKB: int64(res.PeakMemory / 1024), Ran: true, ExitCode: &exit}
	sig := func(n int) { oc.ExitSignal = &n }
	switch res.Status {
	case languages.StatusCompileError:
		oc.StatusID, oc.Ran, oc.ExitCode = j0CE, false, nil
	case languages.StatusInvalid:
		var b strings.Builder
		for _, v := range res.Violations {
			b.WriteString(v.String() + "\n")
		}
		oc.StatusID, oc.Ran, oc.ExitCode, oc.CompileOutput, oc.Message = j0CE, false, nil, []byte(b.String()), res.Message
	case languages.StatusTimeout:
		oc.StatusID, oc.Message = j0TLE, "Time limit exceeded"
		if res.RunTime == 0 {
			// The compile stage's limit: Judge0 says Compilation Error,
			// with its compile_output (isolate_job.rb's compile), and
			// moat's reason names the bound.
			oc.StatusID, oc.Ran, oc.ExitCode, oc.Message = j0CE, false, nil, res.Message
			oc.CompileOutput = []byte("Compilation time limit exceeded.")
		}
	case languages.StatusMemoryLimit:
		oc.StatusID, oc.Message = j0Other, "Memory limit exceeded: "+res.Message
		sig(9)
	case languages.StatusOutputLimit:
		oc.StatusID, oc.Message = j0SIGXFSZ, "Output limit exceeded (max_file_size): "+res.Message
		sig(25)
	case languages.StatusRuntimeError:
		oc.StatusID, oc.Message = judge0Signal(res)
		exit = res.ExitCode // judge0Signal gives a Rust panic its native status
		switch oc.StatusID {
		case j0SIGSEGV:
			sig(11)
		case j0SIGFPE:
			sig(8)
		case j0SIGABRT:
			sig(6)
		case j0Other:
			sig(9)
		}
	case languages.StatusOK:
		oc.StatusID = j0Accepted
		if expected != nil && !judgeOutput(*expected, string(res.Stdout)) {
			oc.StatusID = j0WrongAnswer
		}
	default:
		oc.StatusID, oc.Message = j0Internal, res.Message
	}
	return oc
}

// judge0Signal is a runtime error's status: by the signal that ended a
// native process, by the trap that ended a WASM run, else a non-zero exit
// (NZEC), with Judge0's message for it.
func judge0Signal(res *languages.ExecResult) (int, string) {
	switch res.Signal {
	case "SIGSEGV", "SIGBUS":
		return j0SIGSEGV, "Exited with error status 139"
	case "SIGFPE":
		return j0SIGFPE, "Exited with error status 136"
	case "SIGABRT":
		return j0SIGABRT, "Exited with error status 134"
	case "SIGXFSZ":
		return j0SIGXFSZ, "Exited with error status 153"
	case "":
	default:
		return j0Other, "Killed by " + res.Signal
	}
	if res.ExitCode == -1 { // a WASM trap (languages.Executor.wasmOutcome)
		m := strings.ToLower(res.Message)
		switch {
		case strings.Contains(m, "out of bounds"), strings.Contains(m, "stack"):
			return j0SIGSEGV, res.Message
		case strings.Contains(m, "divide by zero"), strings.Contains(m, "integer overflow"):
			return j0SIGFPE, res.Message
		case strings.Contains(m, "unreachable") && bytes.Contains(res.Stderr, []byte("panicked at")):
			// A Rust panic: natively it unwinds and exits with status
			// 101, which Judge0 reports as NZEC; in WASM it aborts.
			res.ExitCode = 101
			return j0NZEC, "Exited with error status 101"
		case strings.Contains(m, "unreachable"):
			return j0SIGABRT, res.Message
		}
		return j0Other, res.Message
	}
	return j0NZEC, fmt.Sprintf("Exited with error status %d", res.ExitCode)
}

// fitOutcome cuts an outcome's outputs until it fits a task's result
// (abi.MaxTaskResultLen): the outputs the start of each, the tests'
// outputs first.
func fitOutcome(oc *judge0Outcome) *judge0Outcome {
	cut := func(b []byte, n int) []byte {
		if len(b) > n {
			return b[:n]
		}
		return b
	}
	budget := abi.MaxTaskResultLen - 4<<10
	for limit := 24 << 10; ; limit /= 2 {
		oc.Stdout, oc.Stderr, oc.CompileOutput = cut(oc.Stdout, limit), cut(oc.Stderr, limit/2), cut(oc.CompileOutput, limit/2)
		for i := range oc.Tests {
			t := &oc.Tests[i]
			t.Stdout, t.Stderr = cut(t.Stdout, limit/64), cut(t.Stderr, limit/128)
		}
		if b, _ := json.Marshal(oc); len(b) <= budget || limit < 64 {
			return oc
		}
	}
}
