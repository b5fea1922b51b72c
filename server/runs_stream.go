package server

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/languages"
)

// The events of a streamed run's first-time work (preparingEvents).
const (
	eventPreparing = "preparing"
	eventPrepared  = "prepared"
)

// preparingEvents is a streamed run's ExecRequest.Preparing (nil for a
// run that does not stream): when the job's work a later job does not
// repeat (an interpreter compiled to machine code where no cache has it
// yet, Go's standard library built, a program's first build) lasts past
// preparingAfter, a "preparing" event says what (language, stage,
// first_run: what GET /v1/languages says of it), and a "prepared" event
// when it ends, with took_ms; so the client of a first run on a cold
// machine sees why it waits rather than a silent minute, and a quick
// build says nothing (as `moat exec` shows no line for it).
func preparingEvents(info languages.Info, output func(string, []byte)) func(string) func() {
	if output == nil {
		return nil
	}
	first := firstRun(&LanguageJSON{Name: info.Name, Path: info.Path, Toolchain: info.Toolchain})
	return func(stage string) func() {
		began := time.Now()
		var mu sync.Mutex
		said := false
		timer := time.AfterFunc(preparingAfter, func() {
			mu.Lock()
			defer mu.Unlock()
			b, _ := json.Marshal(map[string]string{"language": info.Name, "stage": stage, "first_run": first})
			output(eventPreparing, b)
			said = true
		})
		return func() {
			timer.Stop()
			mu.Lock()
			defer mu.Unlock()
			if said {
				b, _ := json.Marshal(map[string]any{"language": info.Name, "stage": stage, "took_ms": time.Since(began).Milliseconds()})
				output(eventPrepared, b)
			}
		}
	}
}

// preparingAfter is how long first-time work lasts before a streamed run
// says so: a second, as `moat exec` waits before its "preparing" line.
const preparingAfter = time.Second

// streamRun answers POST /v1/runs with server-sent events when the client
// asks for them (Accept: text/event-stream; one job, not a batch): stdout
// and stderr chunks as the program writes them, native runs (bash,
// python3 native) and WASM runs alike (the executor tees the guest's WASI
// stdout and stderr to the stream, below the host's output cap: past
// max_output_bytes the run is stopped, output-limit), then "result", the
// RunResult a JSON answer would be (its stdout and stderr too). Each chunk
// is written before the guest's write returns: a client reading slowly
// slows the program (backpressure, no queue in the server), and one that
// stops reading is dropped a write timeout later; one that goes away
// cancels the run. A refusal comes as an "error" event holding the
// problem, the status line having gone out. A job's first-time work, if
// it does any, comes as "preparing" and "prepared" events around it
// (preparingEvents).
func (s *Server) streamRun(c echo.Context, r RunRequest, budget *responseBudget) error {
	st := s.newSSE(c)
	var mu sync.Mutex
	var seq int64
	streamed := false
	output := func(stream string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		if stream == eventPreparing || stream == eventPrepared {
			_ = st.event(stream, 0, json.RawMessage(b))
			return
		}
		seq++
		streamed = true
		_ = st.event(stream, seq, chunkData(b))
	}
	res, err := s.run(c, r, correlationID(c), budget, output)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		p, ok := err.(*Problem)
		if !ok {
			p = problem(500, "internal", "%v", err)
		}
		_ = st.event("error", 0, p)
		return nil
	}
	if !streamed { // a run whose output did not stream (a runner that
		// does not take ExecRequest.Output): whole, before the result
		for _, o := range []struct{ name, text string }{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
			if o.text != "" {
				seq++
				data := map[string]string{"data": o.text}
				if res.Encoding != "" {
					data["encoding"] = res.Encoding
				}
				_ = st.event(o.name, seq, data)
			}
		}
	}
	_ = st.event("result", 0, res)
	return nil
}
