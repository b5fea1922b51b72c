package server

import (
	"sync"

	"github.com/labstack/echo/v4"
)

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
// problem, the status line having gone out.
func (s *Server) streamRun(c echo.Context, r RunRequest, budget *responseBudget) error {
	st := s.newSSE(c)
	var mu sync.Mutex
	var seq int64
	streamed := false
	output := func(stream string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
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
