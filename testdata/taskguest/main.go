// Command taskguest is a test fixture: a moat plugin that enqueues
// background tasks of its own actions through the Go SDK's typed
// wrappers (moat.Tasks), used by the host's task tests. Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o taskguest.wasm ./testdata/taskguest
//
// Its actions:
//
//	start   enqueues the task its input describes, as JSON
//	        {"action","input","delay","key","max_attempts"}, and returns
//	        {"id","existing"}; an op error is returned with its code
//	work    writes kv key "done:" + input (a mutation in the audit trail)
//	        and returns "worked " + input
//	flaky   counts its runs under kv key "runs:" + input and fails until
//	        the count reaches the number after the last ':' of the input
//	boom    always fails with "boom: " + input
//	slow    sleeps the milliseconds its input says, then returns "slept"
//	status  returns the task.status reply of the id in its input, as JSON
//	cancel  cancels the id in its input; returns "true STATE" or "false STATE"
//	runs    returns the kv count of "runs:" + input
//	wipe    returns "wiped" (the tests' manifest marks it confirm: true)
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() {
	moat.Action("start", start)
	moat.Action("work", func(in []byte) ([]byte, error) {
		if err := moat.KV.Put("done:"+string(in), in); err != nil {
			return nil, err
		}
		return []byte("worked " + string(in)), nil
	})
	moat.Action("flaky", flaky)
	moat.Action("boom", func(in []byte) ([]byte, error) { return nil, errors.New("boom: " + string(in)) })
	moat.Action("slow", func(in []byte) ([]byte, error) {
		ms, err := strconv.Atoi(string(in))
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "slow: want milliseconds, got %q", in)
		}
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return []byte("slept"), nil
	})
	moat.Action("status", func(in []byte) ([]byte, error) {
		st, err := moat.Tasks.Status(string(in))
		if err != nil {
			return nil, err
		}
		return json.Marshal(st)
	})
	moat.Action("cancel", func(in []byte) ([]byte, error) {
		ok, state, err := moat.Tasks.Cancel(string(in))
		if err != nil {
			return nil, err
		}
		return []byte(fmt.Sprint(ok, " ", state)), nil
	})
	moat.Action("wipe", func([]byte) ([]byte, error) { return []byte("wiped"), nil })
	moat.Action("runs", func(in []byte) ([]byte, error) {
		v, _, err := moat.KV.Get("runs:" + string(in))
		return v, err
	})
}

type startRequest struct {
	Action      string `json:"action"`
	Input       string `json:"input"`
	Delay       string `json:"delay"`
	Key         string `json:"key"`
	MaxAttempts int    `json:"max_attempts"`
}

func start(in []byte) ([]byte, error) {
	var req startRequest
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "start: %v", err)
	}
	opts := moat.TaskOptions{Key: req.Key, MaxAttempts: req.MaxAttempts}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "start: delay: %v", err)
		}
		opts.Delay = d
	}
	id, existing, err := moat.Tasks.Enqueue(req.Action, []byte(req.Input), opts)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"id": id, "existing": existing})
}

func flaky(in []byte) ([]byte, error) {
	name := string(in)
	need, err := strconv.Atoi(name[strings.LastIndex(name, ":")+1:])
	if err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "flaky: want NAME:N, got %q", in)
	}
	n := 0
	if v, found, err := moat.KV.Get("runs:" + name); err != nil {
		return nil, err
	} else if found {
		n, _ = strconv.Atoi(string(v))
	}
	n++
	if err := moat.KV.Put("runs:"+name, []byte(strconv.Itoa(n))); err != nil {
		return nil, err
	}
	if n < need {
		return nil, fmt.Errorf("flaky: run %d of %d fails", n, need)
	}
	return []byte(fmt.Sprintf("ran %d times", n)), nil
}

func main() {}
