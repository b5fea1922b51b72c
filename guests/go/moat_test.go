package moat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// reset clears the SDK's package state so each test starts from scratch.
func reset(t *testing.T) {
	t.Helper()
	actions, actionNames, actionList = nil, map[string]bool{}, nil
	inputBuf, lastOutput, respBuf = nil, nil, nil
	old := callHost
	callHost = nil
	t.Cleanup(func() { callHost = old })
}

// fakeHost implements the host side of moat.call the way the ABI describes
// it: a reply that does not fit is kept and fetched with an empty op.
type fakeHost struct {
	t       *testing.T
	ops     map[string]func(req []byte) ([]byte, error)
	calls   []string // op names seen; "" for a fetch
	pending []byte
	pendSt  abi.Status
	caps    []int // the buffer capacity offered on each call
}

func newFakeHost(t *testing.T) *fakeHost {
	h := &fakeHost{t: t, ops: map[string]func([]byte) ([]byte, error){}}
	callHost = h.call
	return h
}

func (h *fakeHost) call(op string, req, resp []byte) (abi.Status, uint32) {
	h.calls = append(h.calls, op)
	h.caps = append(h.caps, len(resp))
	var reply []byte
	var status abi.Status
	if op == "" {
		if h.pending == nil {
			h.t.Fatalf("fetch with no pending reply")
		}
		reply, status, h.pending = h.pending, h.pendSt, nil
	} else {
		fn, ok := h.ops[op]
		if !ok {
			fn = func([]byte) ([]byte, error) { return nil, abi.Errorf(abi.CodeUnknownOp, "no op %q", op) }
		}
		out, err := fn(append([]byte(nil), req...))
		if err != nil {
			var e *abi.Error
			if !errors.As(err, &e) {
				e = &abi.Error{Code: abi.CodeInternal, Message: err.Error()}
			}
			reply, _ = json.Marshal(e)
			status = abi.StatusError
		} else {
			reply, status = out, abi.StatusOK
		}
	}
	if len(reply) > len(resp) {
		h.pending, h.pendSt = reply, status
		return abi.StatusTooSmall, uint32(len(reply))
	}
	copy(resp, reply)
	return status, uint32(len(reply))
}

// typed registers a fake op with JSON request and response types.
func typed[Req, Resp any](h *fakeHost, op string, fn func(*Req) (*Resp, error)) {
	h.ops[op] = func(b []byte) ([]byte, error) {
		var req Req
		if err := json.Unmarshal(b, &req); err != nil {
			h.t.Fatalf("%s: bad request %s: %v", op, b, err)
		}
		resp, err := fn(&req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	}
}

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic; want one containing %q", want)
		}
		if !strings.Contains(fmt.Sprint(r), want) {
			t.Fatalf("panic %q; want one containing %q", r, want)
		}
	}()
	f()
}

func ok(out string) Handler {
	return func([]byte) ([]byte, error) { return []byte(out), nil }
}

func decodeErr(t *testing.T, b []byte) abi.Error {
	t.Helper()
	var e abi.Error
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("failed output %q is not an abi.Error: %v", b, err)
	}
	return e
}

func TestActionListAndDispatch(t *testing.T) {
	reset(t)
	Action("a", ok("A"))
	Action("b", func(in []byte) ([]byte, error) { return append([]byte("b:"), in...), nil })
	Action("c d", ok("C"))

	if got := string(encodeActionList()); got != "a\nb\nc d\n" {
		t.Fatalf("action list %q", got)
	}
	out, failed := invoke(1, []byte("x"))
	if failed || string(out) != "b:x" {
		t.Fatalf("invoke b = %q, %v", out, failed)
	}
	out, failed = invoke(0, nil)
	if failed || string(out) != "A" {
		t.Fatalf("invoke a = %q, %v", out, failed)
	}
	out, failed = invoke(3, nil)
	if !failed || decodeErr(t, out).Code != abi.CodeNoSuchAction {
		t.Fatalf("invoke 3 = %q, %v; want no_such_action", out, failed)
	}
}

func TestEmptyActionList(t *testing.T) {
	reset(t)
	if got := encodeActionList(); got == nil || len(got) != 0 {
		t.Fatalf("empty list = %#v; want empty, non-nil (frozen)", got)
	}
}

func TestActionRegistrationErrors(t *testing.T) {
	reset(t)
	Action("dup", ok(""))
	mustPanic(t, `action "dup" is registered twice`, func() { Action("dup", ok("")) })
	mustPanic(t, "action name is empty", func() { Action("", ok("")) })
	mustPanic(t, "contains a newline", func() { Action("a\nb", ok("")) })
	mustPanic(t, "nil function", func() { Action("nil", nil) })
	encodeActionList()
	mustPanic(t, "after the host read the action list", func() { Action("late", ok("")) })
}

func TestErrorMapping(t *testing.T) {
	notFound := &abi.Error{Code: abi.CodeNotFound, Message: "no such thing"}
	var nilABI *abi.Error
	for _, tc := range []struct {
		name string
		err  error
		want abi.Error
	}{
		{"plain", errors.New("boom"), abi.Error{Code: abi.CodeGuestError, Message: "boom"}},
		{"abi", notFound, abi.Error{Code: abi.CodeNotFound, Message: "no such thing"}},
		{"wrapped", fmt.Errorf("loading: %w", notFound), abi.Error{Code: abi.CodeNotFound, Message: "loading: not_found: no such thing"}},
		{"no code", &abi.Error{Message: "m"}, abi.Error{Code: abi.CodeGuestError, Message: "m"}},
		{"nil abi", nilABI, abi.Error{Code: abi.CodeGuestError, Message: "the action returned a nil *abi.Error as its error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reset(t)
			Action("x", func([]byte) ([]byte, error) { return []byte("ignored"), tc.err })
			out, failed := invoke(0, nil)
			if !failed {
				t.Fatalf("not failed: %q", out)
			}
			if got := decodeErr(t, out); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPanicIsRecovered(t *testing.T) {
	reset(t)
	Action("p", func([]byte) ([]byte, error) { panic("deliberate panic") })
	Action("nilmap", func([]byte) ([]byte, error) {
		var m map[string]int
		//lint:ignore SA5000 the runtime panic is the point of this action
		m["x"] = 1
		return nil, nil
	})
	Action("fine", ok("still alive"))

	stderr := os.Stderr
	r, w, _ := os.Pipe()
	os.Stderr = w
	out, failed := invoke(0, nil)
	out2, failed2 := invoke(1, nil)
	w.Close()
	os.Stderr = stderr
	logged, _ := io.ReadAll(r)

	e := decodeErr(t, out)
	if !failed || e.Code != abi.CodeGuestError || !strings.Contains(e.Message, "deliberate panic") {
		t.Fatalf("panic: got %q, %v", out, failed)
	}
	if e2 := decodeErr(t, out2); !failed2 || e2.Code != abi.CodeGuestError || !strings.Contains(e2.Message, "nil map") {
		t.Fatalf("runtime panic: got %q, %v", out2, failed2)
	}
	if !bytes.Contains(logged, []byte(`moat: action "p" panicked: deliberate panic`)) || !bytes.Contains(logged, []byte("goroutine")) {
		t.Fatalf("stderr lacks the panic and its stack: %q", logged)
	}
	if out, failed := invoke(2, nil); failed || string(out) != "still alive" {
		t.Fatalf("after panics: %q, %v", out, failed)
	}
}

func TestAllocAndInvokeAt(t *testing.T) {
	reset(t)
	Action("echo", func(in []byte) ([]byte, error) { return in, nil })
	Action("len", func(in []byte) ([]byte, error) { return []byte(fmt.Sprint(len(in), in == nil)), nil })

	buf := allocInput(5)
	copy(buf, "hello")
	base := addr(buf)
	out, failed := invokeAt(0, base, 5)
	if failed || string(out) != "hello" {
		t.Fatalf("echo = %q, %v", out, failed)
	}
	if !bytes.Equal(lastOutput, out) {
		t.Fatalf("output not kept in lastOutput")
	}

	// The buffer is reused when big enough, replaced when not.
	if b := allocInput(3); addr(b) != base || len(b) != 3 {
		t.Fatalf("smaller alloc did not reuse the buffer")
	}
	if b := allocInput(100); len(b) != 100 || cap(inputBuf) < 100 {
		t.Fatalf("bigger alloc: len %d cap %d", len(b), cap(inputBuf))
	}
	base = addr(inputBuf)

	// An empty input needs no buffer: the host passes 0, 0.
	if out, failed := invokeAt(1, 0, 0); failed || string(out) != "0 true" {
		t.Fatalf("empty input = %q, %v", out, failed)
	}
	// A sub-range of the buffer is accepted.
	if out, failed := invokeAt(1, base+10, 20); failed || string(out) != "20 false" {
		t.Fatalf("sub-range = %q, %v", out, failed)
	}
	// Ranges outside the buffer are refused, not dereferenced.
	for _, r := range [][2]uint32{{base, 101}, {base + 99, 2}, {base - 1, 1}, {0, 1}, {base + 50, 0xFFFFFFFF}} {
		out, failed := invokeAt(1, r[0], r[1])
		if !failed || decodeErr(t, out).Code != abi.CodeInvalidArgument {
			t.Fatalf("range [%d,+%d) = %q, %v; want invalid_argument", r[0], r[1], out, failed)
		}
	}
}

func TestLargeBuffersAreReleased(t *testing.T) {
	reset(t)
	Action("x", ok(""))
	allocInput(maxRetainedBuf + 1)
	respBuf = make([]byte, maxRetainedBuf+1)
	invokeAt(0, 0, 0)
	if inputBuf != nil || respBuf != nil {
		t.Fatalf("large buffers kept: input %d, resp %d", cap(inputBuf), cap(respBuf))
	}
	allocInput(1000)
	respBuf = make([]byte, initialRespBuf)
	invokeAt(0, 0, 0)
	if cap(inputBuf) != 1000 || cap(respBuf) != initialRespBuf {
		t.Fatalf("small buffers dropped")
	}
}

func TestCallOK(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	typed(h, abi.OpConfigGet, func(r *abi.ConfigGetRequest) (*abi.ConfigGetResponse, error) {
		if r.Key == "greeting" {
			return &abi.ConfigGetResponse{Value: "Hi", Found: true}, nil
		}
		return &abi.ConfigGetResponse{}, nil
	})
	v, found, err := Config("greeting")
	if err != nil || !found || v != "Hi" {
		t.Fatalf("Config(greeting) = %q, %v, %v", v, found, err)
	}
	v, found, err = Config("other")
	if err != nil || found || v != "" {
		t.Fatalf("Config(other) = %q, %v, %v", v, found, err)
	}
	if want := []string{abi.OpConfigGet, abi.OpConfigGet}; !reflect.DeepEqual(h.calls, want) {
		t.Fatalf("calls %q, want %q", h.calls, want)
	}
	if h.caps[0] != initialRespBuf {
		t.Fatalf("first buffer %d bytes, want %d", h.caps[0], initialRespBuf)
	}
}

func TestCallTooSmallRetry(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	big := bytes.Repeat([]byte("v"), 40<<10)
	typed(h, abi.OpKVGet, func(r *abi.KVGetRequest) (*abi.KVGetResponse, error) {
		return &abi.KVGetResponse{Value: big, Found: true}, nil
	})
	got, found, err := KV.Get("k")
	if err != nil || !found || !bytes.Equal(got, big) {
		t.Fatalf("Get = %d bytes, %v, %v", len(got), found, err)
	}
	if want := []string{abi.OpKVGet, ""}; !reflect.DeepEqual(h.calls, want) {
		t.Fatalf("calls %q, want %q (op, then a fetch with an empty op)", h.calls, want)
	}
	if h.caps[1] <= initialRespBuf || len(respBuf) != h.caps[1] {
		t.Fatalf("buffer not grown for the fetch: caps %v", h.caps)
	}
	// The grown buffer is reused: the next big reply takes one crossing.
	h.calls = nil
	if _, _, err := KV.Get("k"); err != nil || len(h.calls) != 1 {
		t.Fatalf("second Get: %v, calls %q", err, h.calls)
	}
}

func TestCallTooSmallError(t *testing.T) {
	// A StatusError reply that does not fit is fetched and decoded too.
	reset(t)
	h := newFakeHost(t)
	long := strings.Repeat("e", 20<<10)
	h.ops[abi.OpKVPut] = func([]byte) ([]byte, error) { return nil, abi.Errorf(abi.CodeTooLarge, "%s", long) }
	err := KV.Put("k", []byte("v"))
	var e *abi.Error
	if !errors.As(err, &e) || e.Code != abi.CodeTooLarge || e.Message != long {
		t.Fatalf("Put error = %v", err)
	}
	if want := []string{abi.OpKVPut, ""}; !reflect.DeepEqual(h.calls, want) {
		t.Fatalf("calls %q, want %q", h.calls, want)
	}
}

func TestCallErrors(t *testing.T) {
	reset(t)
	if err := Call(abi.OpKVGet, nil, nil); !errors.Is(err, errNoHost) {
		t.Fatalf("no host: %v", err)
	}
	h := newFakeHost(t)
	h.ops[abi.OpKVDelete] = func([]byte) ([]byte, error) { return nil, abi.Errorf(abi.CodeDenied, "policy says no") }

	_, err := KV.Delete("k")
	var e *abi.Error
	if !errors.As(err, &e) || e.Code != abi.CodeDenied || e.Message != "policy says no" {
		t.Fatalf("denied: %v", err)
	}
	if err := Call("no.such.op", nil, nil); !errors.As(err, &e) || e.Code != abi.CodeUnknownOp {
		t.Fatalf("unknown op: %v", err)
	}
	if err := Call("", nil, nil); !errors.As(err, &e) || e.Code != abi.CodeInvalidArgument {
		t.Fatalf("empty op: %v", err)
	}
	if err := Call("x", func() {}, nil); !errors.As(err, &e) || e.Code != abi.CodeInvalidArgument {
		t.Fatalf("unencodable request: %v", err)
	}

	// Replies the SDK cannot trust become internal errors, not panics.
	for name, fake := range map[string]func(string, []byte, []byte) (abi.Status, uint32){
		"bad error body": func(_ string, _, resp []byte) (abi.Status, uint32) {
			return abi.StatusError, uint32(copy(resp, "not json"))
		},
		"unknown status": func(string, []byte, []byte) (abi.Status, uint32) { return 7, 0 },
		"overlong reply": func(_ string, _, resp []byte) (abi.Status, uint32) { return abi.StatusOK, uint32(len(resp) + 1) },
		"too small twice": func(_ string, _, resp []byte) (abi.Status, uint32) {
			return abi.StatusTooSmall, uint32(len(resp) + 1)
		},
		"too small but fits": func(string, []byte, []byte) (abi.Status, uint32) { return abi.StatusTooSmall, 1 },
		"bad ok body": func(_ string, _, resp []byte) (abi.Status, uint32) {
			return abi.StatusOK, uint32(copy(resp, "{"))
		},
	} {
		callHost = fake
		_, _, err := KV.Get("k")
		if !errors.As(err, &e) || e.Code != abi.CodeInternal {
			t.Errorf("%s: got %v, want an internal *abi.Error", name, err)
		}
	}
}

func TestCallRequestAndReply(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	var sent []byte
	h.ops["x.echo"] = func(req []byte) ([]byte, error) { sent = req; return req, nil }

	var got map[string]int
	if err := Call("x.echo", map[string]int{"a": 1}, &got); err != nil || got["a"] != 1 {
		t.Fatalf("Call = %v, %v", got, err)
	}
	if err := Call("x.echo", nil, nil); err != nil || string(sent) != "{}" {
		t.Fatalf("nil request sent %q, %v", sent, err)
	}
	// A RawMessage reply is a copy, not a view of the reused buffer.
	var raw json.RawMessage
	if err := Call("x.echo", map[string]string{"k": "v1"}, &raw); err != nil {
		t.Fatal(err)
	}
	if err := Call("x.echo", map[string]string{"k": "v2"}, nil); err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"k":"v1"}` {
		t.Fatalf("raw reply changed to %s", raw)
	}
}

func TestKV(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	store := map[string][]byte{}
	typed(h, abi.OpKVPut, func(r *abi.KVPutRequest) (*abi.Empty, error) {
		if r.Value == nil {
			t.Errorf("Put sent a null value")
		}
		store[r.Key] = r.Value
		return &abi.Empty{}, nil
	})
	typed(h, abi.OpKVGet, func(r *abi.KVGetRequest) (*abi.KVGetResponse, error) {
		v, ok := store[r.Key]
		return &abi.KVGetResponse{Value: v, Found: ok}, nil
	})
	typed(h, abi.OpKVDelete, func(r *abi.KVDeleteRequest) (*abi.KVDeleteResponse, error) {
		_, ok := store[r.Key]
		delete(store, r.Key)
		return &abi.KVDeleteResponse{Deleted: ok}, nil
	})
	const page = 3
	typed(h, abi.OpKVList, func(r *abi.KVListRequest) (*abi.KVListResponse, error) {
		var keys []string
		for k := range store {
			if strings.HasPrefix(k, r.Prefix) && k > r.After {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		more := len(keys) > page
		if more {
			keys = keys[:page]
		}
		return &abi.KVListResponse{Keys: keys, More: more}, nil
	})

	if err := KV.Put("count", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := KV.Put("empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, found, err := KV.Get("count"); err != nil || !found || string(v) != "1" {
		t.Fatalf("Get(count) = %q, %v, %v", v, found, err)
	}
	if v, found, err := KV.Get("empty"); err != nil || !found || v == nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %#v, %v, %v; want an empty non-nil value", v, found, err)
	}
	if v, found, err := KV.Get("missing"); err != nil || found || v != nil {
		t.Fatalf("Get(missing) = %q, %v, %v", v, found, err)
	}
	if d, err := KV.Delete("count"); err != nil || !d {
		t.Fatalf("Delete(count) = %v, %v", d, err)
	}
	if d, err := KV.Delete("count"); err != nil || d {
		t.Fatalf("second Delete(count) = %v, %v", d, err)
	}

	var want []string
	for i := range 8 {
		k := fmt.Sprintf("p/%d", i)
		want = append(want, k)
		store[k] = []byte("x")
	}
	h.calls = nil
	keys, err := KV.List("p/")
	if err != nil || !reflect.DeepEqual(keys, want) {
		t.Fatalf("List(p/) = %q, %v; want %q", keys, err, want)
	}
	if len(h.calls) != 3 {
		t.Fatalf("List took %d ops, want 3 pages", len(h.calls))
	}
	if keys, err := KV.List("none/"); err != nil || len(keys) != 0 {
		t.Fatalf("List(none/) = %q, %v", keys, err)
	}

	// A host that claims more keys but sends none must not loop forever.
	typed(h, abi.OpKVList, func(*abi.KVListRequest) (*abi.KVListResponse, error) {
		return &abi.KVListResponse{More: true}, nil
	})
	if _, err := KV.List(""); err == nil {
		t.Fatal("List with an endless empty page: no error")
	}
}

func TestLog(t *testing.T) {
	reset(t)
	h := newFakeHost(t)
	var got []abi.LogWriteRequest
	h.ops[abi.OpLogWrite] = func(b []byte) ([]byte, error) {
		var r abi.LogWriteRequest
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("log.write request %s: %v", b, err)
		}
		got = append(got, r)
		return []byte("{}"), nil
	}

	Log.Info("greeting", "name", "World", "n", 3, "err", errors.New("oops"))
	Log.Debug("d")
	Log.Warn("w", "dangling")
	Log.Error("e", 42, "v")
	if err := Log.Write(abi.LevelInfo, "f", map[string]any{"fn": func() {}, "ok": 1}); err != nil {
		t.Fatal(err)
	}

	want := []abi.LogWriteRequest{
		{Level: "info", Message: "greeting", Fields: map[string]any{"name": "World", "n": 3.0, "err": "oops"}},
		{Level: "debug", Message: "d"},
		{Level: "warn", Message: "w", Fields: map[string]any{"!BADKEY": "dangling"}},
		// 42 is not a key and "v" is then left dangling: slog logs both
		// under !BADKEY; in a map the second wins.
		{Level: "error", Message: "e", Fields: map[string]any{"!BADKEY": "v"}},
		{Level: "info", Message: "f"}, // checked below
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if i == 4 {
			// An unencodable field makes every field text.
			if got[i].Fields["ok"] != "1" || !strings.HasPrefix(fmt.Sprint(got[i].Fields["fn"]), "0x") {
				t.Errorf("record %d: %+v", i, got[i])
			}
			continue
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("record %d: got %+v, want %+v", i, got[i], want[i])
		}
	}

	// Logging must never fail an action: errors are dropped by Info and
	// reported by Write.
	h.ops[abi.OpLogWrite] = func([]byte) ([]byte, error) { return nil, abi.Errorf(abi.CodeDenied, "no logs") }
	Log.Info("dropped")
	var e *abi.Error
	if err := Log.Write(abi.LevelInfo, "x", nil); !errors.As(err, &e) || e.Code != abi.CodeDenied {
		t.Fatalf("Write on refusal: %v", err)
	}
}

func TestOpsInsideAction(t *testing.T) {
	// The whole path as the host drives it: alloc, write input, invoke; the
	// action's op error keeps its code on the way out.
	reset(t)
	h := newFakeHost(t)
	h.ops[abi.OpKVGet] = func([]byte) ([]byte, error) { return nil, abi.Errorf(abi.CodeDenied, "kv.get denied") }
	Action("get", func(in []byte) ([]byte, error) {
		_, _, err := KV.Get(string(in))
		return nil, err
	})
	encodeActionList()
	buf := allocInput(3)
	copy(buf, "key")
	out, failed := invokeAt(0, addr(buf), 3)
	if e := decodeErr(t, out); !failed || e.Code != abi.CodeDenied || e.Message != "kv.get denied" {
		t.Fatalf("got %q, %v", out, failed)
	}
}

func TestDecodeKVGet(t *testing.T) {
	for _, tc := range []struct {
		body  string
		value []byte
		found bool
		fail  bool
	}{
		{body: `{"value":"aGVsbG8=","found":true}`, value: []byte("hello"), found: true}, // fast path
		{body: `{"found":true}`, found: true},                                            // empty value
		{body: `{"found":false}`},
		{body: `{"value":"aGVs\u0062G8=","found":true}`, value: []byte("hello"), found: true}, // escaped: slow path
		{body: `{"found":true,"value":"aGVsbG8="}`, value: []byte("hello"), found: true},      // other order
		{body: `{"value":"aGVs\nbG8=","found":true}`, value: []byte("hello"), found: true},    // JSON escape: slow path
		{body: "{\"value\":\"aGVs\nbG8=\",\"found\":true}", fail: true},                       // raw newline is not JSON
		{body: `{"value":"!!!!","found":true}`, fail: true},
		{body: `{"value":"`, fail: true},
	} {
		var resp abi.KVGetResponse
		err := decodeKVGet([]byte(tc.body), &resp)
		if tc.fail {
			var e *abi.Error
			if !errors.As(err, &e) || e.Code != abi.CodeInternal {
				t.Errorf("%s: err %v, want an internal error", tc.body, err)
			}
			continue
		}
		if err != nil || resp.Found != tc.found || !bytes.Equal(resp.Value, tc.value) {
			t.Errorf("%s: got %q, %v, %v", tc.body, resp.Value, resp.Found, err)
		}
	}
}
