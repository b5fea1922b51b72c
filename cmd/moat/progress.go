package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress reports long work on stderr: on a terminal, one line redrawn in
// place (a bar when the total is known, the elapsed time otherwise); on
// anything else (a log, a CI job), a line when a step starts and one when
// it ends, so logs stay readable and greppable; under --log-format json,
// those lines are log records.
type progress struct {
	w   io.Writer
	tty bool
	log *slog.Logger // --log-format json: records, not lines
}

func newProgress(f *os.File) *progress {
	return &progress{w: f, tty: term.IsTerminal(int(f.Fd()))}
}

// progress reports on stderr as the command's logs do: JSON records under
// --log-format json, lines (or a redrawn line on a terminal) otherwise.
func (g *globalFlags) progress() *progress {
	if g.logFormat == "json" {
		if log, err := g.logger(); err == nil {
			return &progress{w: os.Stderr, log: log}
		}
	}
	return newProgress(os.Stderr)
}

// bytesStep tracks one download.
type bytesStep struct {
	p     *progress
	label string
	began time.Time
	mu    sync.Mutex
	last  time.Time
	done  int64
	total int64
}

// bytes starts a step that moves bytes (a download).
func (p *progress) bytes(label string) *bytesStep {
	switch {
	case p.log != nil:
		p.log.Info("downloading", "step", label)
	case !p.tty:
		fmt.Fprintf(p.w, "moat: %s: downloading\n", label)
	}
	return &bytesStep{p: p, label: label, began: time.Now(), total: -1}
}

// update is the callback for toolchains.InstallNPM.
func (s *bytesStep) update(done, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done, s.total = done, total
	if !s.p.tty || time.Since(s.last) < 100*time.Millisecond {
		return
	}
	s.last = time.Now()
	fmt.Fprintf(s.p.w, "\r\033[K%s", barLine(s.label, done, total))
}

// end finishes the step: err nil, it worked.
func (s *bytesStep) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p.log != nil {
		s.p.log.Info("downloaded", "step", s.label, "bytes", s.done, "elapsed_ms", time.Since(s.began).Milliseconds(), "ok", err == nil)
		return
	}
	if s.p.tty {
		fmt.Fprint(s.p.w, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(s.p.w, "moat: %s: failed after %s\n", s.label, shortDuration(time.Since(s.began)))
		return
	}
	fmt.Fprintf(s.p.w, "moat: %s: %s in %s\n", s.label, byteSize(s.done), shortDuration(time.Since(s.began)))
}

// barLine is "label  [#####.....]  12.3/26.0 MB  47%", or without the bar
// when the total is unknown.
func barLine(label string, done, total int64) string {
	if total <= 0 {
		return fmt.Sprintf("moat: %s  %.1f MB", label, float64(done)/1e6)
	}
	const width = 30
	n := int(done * width / total)
	n = min(max(n, 0), width)
	return fmt.Sprintf("moat: %s  [%s%s]  %.1f/%.1f MB  %d%%", label, strings.Repeat("#", n), strings.Repeat(".", width-n),
		float64(done)/1e6, float64(total)/1e6, done*100/total)
}

// timedStep tracks work that has no fraction to show (a compiler, an
// interpreter's first compile): the elapsed time.
type timedStep struct {
	p     *progress
	label string
	began time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// progressEvery is how often a step still at work says so on a stderr
// that is not a terminal.
const progressEvery = 10 * time.Second

// timed starts a step with no known total: "preparing go… 4s".
func (p *progress) timed(label string) *timedStep {
	s := &timedStep{p: p, label: label, began: time.Now(), stop: make(chan struct{})}
	if p.log != nil {
		p.log.Info("started", "step", label)
		return s
	}
	if !p.tty {
		// A log, not a terminal: a line now and one every progressEvery
		// while it lasts, so a long step (an interpreter's compile in
		// `make image`) says it is still at work, and for how long.
		fmt.Fprintf(p.w, "moat: %s…\n", label)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-t.C:
					fmt.Fprintf(p.w, "moat: %s… %s so far\n", label, time.Since(s.began).Truncate(time.Second))
				}
			}
		}()
		return s
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			fmt.Fprintf(p.w, "\r\033[Kmoat: %s… %s", label, time.Since(s.began).Truncate(time.Second))
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end finishes the step with a line saying how long it took.
func (s *timedStep) end(err error) {
	close(s.stop)
	s.wg.Wait()
	if s.p.log != nil {
		if err != nil {
			s.p.log.Warn("failed", "step", s.label, "elapsed_ms", time.Since(s.began).Milliseconds(), "error", oneLine(err))
		} else {
			s.p.log.Info("done", "step", s.label, "elapsed_ms", time.Since(s.began).Milliseconds())
		}
		return
	}
	if s.p.tty {
		fmt.Fprint(s.p.w, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(s.p.w, "moat: %s: failed after %s: %s\n", s.label, shortDuration(time.Since(s.began)), oneLine(err))
		return
	}
	fmt.Fprintf(s.p.w, "moat: %s: done in %s\n", s.label, shortDuration(time.Since(s.began)))
}

// preparingAfter is how long first-time work lasts before it shows: a
// second, or $MOAT_PREPARING_AFTER (a duration; 0 shows every step, which
// the tests use to see each one the executor reports).
func preparingAfter() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MOAT_PREPARING_AFTER")); err == nil && d >= 0 {
		return d
	}
	return time.Second
}

// preparer is an ExecRequest.Preparing for lang: the host calls it only
// for work a later run does not repeat (LoadOptions.FirstTime), so a
// "once" in its label is true; first-time work that
// lasts past a second shows as a timed step ("preparing go (building the
// standard library…)"), and nothing shows for work that ends sooner, so
// warm runs print what they always did.
func (p *progress) preparer(lang string) func(stage string) func() {
	return func(stage string) func() {
		label := "preparing " + lang + " (a first build; cached for next time)"
		if stage == "load" {
			label = "preparing " + lang + " (compiling it to machine code, once)"
		}
		var mu sync.Mutex
		var step *timedStep
		timer := time.AfterFunc(preparingAfter(), func() {
			mu.Lock()
			defer mu.Unlock()
			step = p.timed(label)
		})
		return func() {
			timer.Stop()
			mu.Lock()
			defer mu.Unlock()
			if step != nil {
				step.end(nil)
			}
		}
	}
}

// byteSize is n in kB or MB, decimal (as download sizes are given).
func byteSize(n int64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
