// Command pipeworker is a native worker for moat's tests: it speaks the pipe
// transport (abi.PipeMessage lines on fds 3 and 4) and offers actions that
// exercise it: echo, count (kv.get then kv.put through the host), fail,
// crash (exits), hang (never answers), garbage (writes a malformed line),
// hog (allocates memory until its cgroup's OOM killer ends it).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

var (
	in    = bufio.NewScanner(os.NewFile(abi.PipeFromHostFD, "from-host"))
	out   = os.NewFile(abi.PipeToHostFD, "to-host")
	calls uint64
)

func send(m abi.PipeMessage) {
	b, _ := json.Marshal(m)
	out.Write(append(b, '\n'))
}

func recv() abi.PipeMessage {
	if !in.Scan() {
		os.Exit(0)
	}
	var m abi.PipeMessage
	if err := json.Unmarshal(in.Bytes(), &m); err != nil {
		fmt.Fprintln(os.Stderr, "pipeworker: bad line:", err)
		os.Exit(2)
	}
	return m
}

// call runs an op on the host and decodes the reply into resp.
func call(op string, req, resp any) error {
	calls++
	b, _ := json.Marshal(req)
	send(abi.PipeMessage{Type: abi.PipeCall, ID: calls, Op: op, Req: b})
	m := recv()
	if m.Type != abi.PipeReply || m.ID != calls {
		fmt.Fprintln(os.Stderr, "pipeworker: expected reply", calls, "got", m.Type, m.ID)
		os.Exit(2)
	}
	if m.Error != nil {
		return m.Error
	}
	return json.Unmarshal(m.Resp, resp)
}

func main() {
	in.Buffer(make([]byte, 64<<10), abi.MaxPipeLine)
	send(abi.PipeMessage{Type: abi.PipeReady, Version: abi.Version, Actions: []string{"echo", "count", "fail", "crash", "hang", "garbage", "hog"}})
	for {
		m := recv()
		switch m.Type {
		case abi.PipePing:
			send(abi.PipeMessage{Type: abi.PipePong, ID: m.ID})
		case abi.PipeInvoke:
			out, err := invoke(m.Action, m.Input)
			res := abi.PipeMessage{Type: abi.PipeResult, ID: m.ID, Output: out}
			if err != nil {
				res.Error = &abi.Error{Code: abi.CodeGuestError, Message: err.Error()}
				if e, ok := err.(*abi.Error); ok {
					res.Error = e
				}
			}
			send(res)
		}
	}
}

func invoke(action string, input []byte) ([]byte, error) {
	switch action {
	case "echo":
		return input, nil
	case "count":
		var got abi.KVGetResponse
		if err := call(abi.OpKVGet, abi.KVGetRequest{Key: "count"}, &got); err != nil {
			return nil, err
		}
		n, _ := strconv.Atoi(string(got.Value))
		n++
		if err := call(abi.OpKVPut, abi.KVPutRequest{Key: "count", Value: []byte(strconv.Itoa(n))}, &abi.Empty{}); err != nil {
			return nil, err
		}
		return []byte(strconv.Itoa(n)), nil
	case "fail":
		return nil, fmt.Errorf("deliberate failure")
	case "crash":
		fmt.Fprintln(os.Stderr, "pipeworker: crashing on purpose")
		os.Exit(3)
	case "hang":
		time.Sleep(time.Hour)
	case "garbage":
		out.Write([]byte("this is not json\n"))
		time.Sleep(time.Hour)
	case "hog":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	}
	return nil, &abi.Error{Code: abi.CodeNoSuchAction, Message: "no action " + action}
}
