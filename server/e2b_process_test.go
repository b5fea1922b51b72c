package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/moat-sandbox/moat/server"
)

// e2bMsg is any envd message, as JSON.
type e2bMsg = map[string]any

// TestE2BProcess: envd's process service as E2B's SDKs call it (Connect,
// JSON): Start of /bin/bash -l -c CMD streams start{pid}, data (stdout
// and stderr as base64 bytes) as produced, and end{exitCode}; a
// background process with stdin is listed, fed by SendInput, closed by
// CloseStdin, reached again by Connect, and killed by SendSignal; a pty is
// refused; another session's token is not found.
func TestE2BProcess(t *testing.T) {
	requireCommands(t)
	t.Parallel()
	ts := start(t, "", nil)
	ann := ts.key(t, "acme", "ann")
	id := newSession(t, ts, ann)
	token := server.E2BAccessToken(ts.Server, id, "acme", "ann")
	url := ts.URL + "/e2b/sandbox/process.Process/"
	headers := func(h http.Header, token string) {
		h.Set("E2b-Sandbox-Id", id)
		h.Set("E2b-Sandbox-Port", "49983")
		h.Set("X-Access-Token", token)
	}
	unary := func(proc string, msg e2bMsg) (e2bMsg, error) {
		c := connect.NewClient[e2bMsg, e2bMsg](http.DefaultClient, url+proc, connect.WithCodec(jsonCodec{}))
		req := connect.NewRequest(&msg)
		headers(req.Header(), token)
		res, err := c.CallUnary(context.Background(), req)
		if err != nil {
			return nil, err
		}
		return *res.Msg, nil
	}
	stream := func(ctx context.Context, proc string, msg e2bMsg, token string) (*connect.ServerStreamForClient[e2bMsg], error) {
		c := connect.NewClient[e2bMsg, e2bMsg](http.DefaultClient, url+proc, connect.WithCodec(jsonCodec{}))
		req := connect.NewRequest(&msg)
		headers(req.Header(), token)
		return c.CallServerStream(ctx, req)
	}
	type ev struct {
		kind string
		body e2bMsg
		at   time.Duration
	}
	collect := func(st *connect.ServerStreamForClient[e2bMsg], began time.Time, upTo int) []ev {
		var out []ev
		for len(out) < upTo && st.Receive() {
			for k, v := range (*st.Msg())["event"].(e2bMsg) {
				out = append(out, ev{k, v.(e2bMsg), time.Since(began)})
			}
		}
		return out
	}

	// commands.run("echo one; sleep 1; echo two >&2; exit 4")
	began := time.Now()
	st, err := stream(context.Background(), "Start", e2bMsg{"process": e2bMsg{"cmd": "/bin/bash", "args": []string{"-l", "-c", "echo one; sleep 1; echo two >&2; exit 4"}, "envs": e2bMsg{"A": "b"}}, "stdin": false}, token)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(st, began, 10)
	st.Close()
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.kind)
	}
	if strings.Join(kinds, " ") != "start data data end" {
		t.Fatalf("events %v (%v)", evs, st.Err())
	}
	if evs[0].body["pid"] != 1.0 || evs[1].body["stdout"] != "b25lCg==" || evs[2].body["stderr"] != "dHdvCg==" {
		t.Fatalf("start and data: %v", evs)
	}
	if end := evs[3].body; end["exitCode"] != 4.0 || end["exited"] != true || end["status"] != "exit status 4" {
		t.Fatalf("end: %v", end)
	}
	if evs[3].at-evs[1].at < 700*time.Millisecond {
		t.Fatalf("the first data came %v before the end: not streamed", evs[3].at-evs[1].at)
	}

	// A background process with stdin, reached by pid.
	ctx, cancel := context.WithCancel(context.Background())
	st, err = stream(ctx, "Start", e2bMsg{"process": e2bMsg{"cmd": "/bin/bash", "args": []string{"-l", "-c", "cat; echo done"}, "cwd": "/home/user"}, "stdin": true, "tag": "catter"}, token)
	if err != nil {
		t.Fatal(err)
	}
	evs = collect(st, began, 1)
	cancel() // the SDK's background handle may go; the process stays
	st.Close()
	if len(evs) != 1 || evs[0].kind != "start" {
		t.Fatalf("background start: %v", evs)
	}
	pid := evs[0].body["pid"]
	list, err := unary("List", e2bMsg{})
	if err != nil || !strings.Contains(mustJSON(list), `"tag":"catter"`) {
		t.Fatalf("List: %v %v", list, err)
	}
	if _, err := unary("SendInput", e2bMsg{"process": e2bMsg{"pid": pid}, "input": e2bMsg{"stdin": "aGVsbG8K"}}); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	if _, err := unary("CloseStdin", e2bMsg{"process": e2bMsg{"tag": "catter"}}); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	st, err = stream(context.Background(), "Connect", e2bMsg{"process": e2bMsg{"pid": pid}}, token)
	if err != nil {
		t.Fatal(err)
	}
	evs = collect(st, began, 10)
	st.Close()
	// The output may come in one chunk or two (hello, then done): what
	// the pipe held when it was read.
	var out []byte
	for _, e := range evs {
		if s, ok := e.body["stdout"].(string); ok && e.kind == "data" {
			b, _ := base64.StdEncoding.DecodeString(s)
			out = append(out, b...)
		}
	}
	if len(evs) < 3 || evs[len(evs)-1].kind != "end" || evs[len(evs)-1].body["exitCode"] != 0.0 || string(out) != "hello\ndone\n" {
		t.Fatalf("Connect after the input: %v (stdout %q)", evs, out)
	}

	// kill: SIGKILL by name.
	st, err = stream(context.Background(), "Start", e2bMsg{"process": e2bMsg{"cmd": "/bin/bash", "args": []string{"-c", "sleep 60"}}}, token)
	if err != nil {
		t.Fatal(err)
	}
	evs = collect(st, began, 1)
	if _, err := unary("SendSignal", e2bMsg{"process": e2bMsg{"pid": evs[0].body["pid"]}, "signal": "SIGNAL_SIGKILL"}); err != nil {
		t.Fatalf("SendSignal: %v", err)
	}
	evs = collect(st, began, 5)
	st.Close()
	if len(evs) != 1 || evs[0].kind != "end" || evs[0].body["exited"] != false {
		t.Fatalf("after SIGKILL: %v", evs)
	}

	// Refusals.
	st, _ = stream(context.Background(), "Start", e2bMsg{"process": e2bMsg{"cmd": "/bin/bash", "args": []string{"-i", "-l"}}, "pty": e2bMsg{"size": e2bMsg{"cols": 80, "rows": 24}}}, token)
	if collect(st, began, 1); connect.CodeOf(st.Err()) != connect.CodeFailedPrecondition {
		t.Errorf("a pty: %v", st.Err())
	}
	other := newSession(t, ts, ann)
	st, _ = stream(context.Background(), "Start", e2bMsg{"process": e2bMsg{"cmd": "/bin/bash", "args": []string{"-c", "id"}}}, server.E2BAccessToken(ts.Server, other, "acme", "ann"))
	if collect(st, began, 1); connect.CodeOf(st.Err()) != connect.CodeNotFound && connect.CodeOf(st.Err()) != connect.CodeUnimplemented {
		t.Errorf("another session's token: %v", st.Err()) // the data plane's 404 (e2b_sandbox.go)
	}
	if _, err := unary("SendSignal", e2bMsg{"process": e2bMsg{"pid": 99}, "signal": "SIGNAL_SIGTERM"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("no such pid: %v", err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
