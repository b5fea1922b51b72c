package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// taskEnv is an Env of module "mod" for ann@acme on a real store.
func taskEnv(t *testing.T) *ops.Env {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	views := attachViews(t, st, "", "name: mod\nversion: 1.0.0\nactions: [{name: work}, {name: wipe, confirm: true}]\ncapabilities: {tasks: true}\n")
	env := &ops.Env{Module: "mod", Store: st, Logger: slog.New(slog.DiscardHandler), Views: views}
	env.Begin(context.Background(), "start", policy.Principal{User: "ann", Org: "acme", Roles: []string{"dev"}}, "corr-1")
	return env
}

func callTask(env *ops.Env, op string, req any) ([]byte, error) {
	o, _ := ops.Lookup([]byte(op))
	b, _ := json.Marshal(req)
	return ops.Dispatch(env, allowAll, o, b)
}

// The request's delay and at are read, bounded and checked here; every
// refusal names its field.
func TestTaskEnqueueTimes(t *testing.T) {
	env := taskEnv(t)
	now := time.Now()
	tests := []struct {
		name    string
		req     abi.TaskEnqueueRequest
		code    abi.Code
		want    string
		runFrom time.Duration // when it succeeds: the run time is at least now + this
	}{
		{name: "now", req: abi.TaskEnqueueRequest{Action: "work"}},
		{name: "delay", req: abi.TaskEnqueueRequest{Action: "work", Delay: "90m"}, runFrom: 89 * time.Minute},
		{name: "at", req: abi.TaskEnqueueRequest{Action: "work", At: now.Add(2 * time.Hour).Format(time.RFC3339)}, runFrom: 119 * time.Minute},
		{name: "at in the past", req: abi.TaskEnqueueRequest{Action: "work", At: "2001-01-01T00:00:00Z"}},
		{name: "both", req: abi.TaskEnqueueRequest{Action: "work", Delay: "1s", At: "2030-01-01T00:00:00Z"}, code: abi.CodeInvalidArgument, want: "not both"},
		{name: "negative delay", req: abi.TaskEnqueueRequest{Action: "work", Delay: "-1s"}, code: abi.CodeInvalidArgument, want: "delay"},
		{name: "31 days", req: abi.TaskEnqueueRequest{Action: "work", Delay: "744h"}, code: abi.CodeInvalidArgument, want: "delay"},
		{name: "delay overflow", req: abi.TaskEnqueueRequest{Action: "work", Delay: "9999999999999h"}, code: abi.CodeInvalidArgument, want: "delay"},
		{name: "delay as words", req: abi.TaskEnqueueRequest{Action: "work", Delay: "tomorrow'); --"}, code: abi.CodeInvalidArgument, want: "not a duration"},
		{name: "far at", req: abi.TaskEnqueueRequest{Action: "work", At: "9999-12-31T23:59:59Z"}, code: abi.CodeInvalidArgument, want: "30 days"},
		{name: "bad at", req: abi.TaskEnqueueRequest{Action: "work", At: "next tuesday"}, code: abi.CodeInvalidArgument, want: "RFC 3339"},
		{name: "unknown action", req: abi.TaskEnqueueRequest{Action: "other"}, code: abi.CodeInvalidArgument, want: `module mod has no action "other"; its actions are: work, wipe`},
		{name: "needs confirmation", req: abi.TaskEnqueueRequest{Action: "wipe"}, code: abi.CodeInvalidArgument, want: "action wipe needs confirmation"},
		{name: "attempts", req: abi.TaskEnqueueRequest{Action: "work", MaxAttempts: abi.MaxTaskAttempts + 1}, code: abi.CodeInvalidArgument, want: "max_attempts"},
	}
	for _, tt := range tests {
		out, err := callTask(env, abi.OpTaskEnqueue, tt.req)
		if tt.code != "" {
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != tt.code || !strings.Contains(ae.Message, tt.want) {
				t.Errorf("%s: %v; want %s naming %q", tt.name, err, tt.code, tt.want)
			}
			continue
		}
		var resp abi.TaskEnqueueResponse
		if err != nil || json.Unmarshal(out, &resp) != nil {
			t.Fatalf("%s: %s, %v", tt.name, out, err)
		}
		tk, err := env.Store.TaskGet(context.Background(), env.Scope(), resp.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tk.RunAt.Before(now.Add(tt.runFrom)) || tk.RunAt.After(time.Now().Add(tt.runFrom+time.Minute)) || tk.CorrelationID != "corr-1" || tk.User != "ann" {
			t.Errorf("%s: task runs at %s (now %s), as %s, correlation %s", tt.name, tk.RunAt, now, tk.User, tk.CorrelationID)
		}
		st, err := callTask(env, abi.OpTaskStatus, abi.TaskIDRequest{ID: resp.ID})
		if err != nil || !strings.Contains(string(st), `"state":"queued"`) || !strings.Contains(string(st), `"run_at"`) {
			t.Errorf("%s: status = %s, %v", tt.name, st, err)
		}
	}
	// Without the family's view of the module, the family says so.
	env.Views = nil
	if _, err := callTask(env, abi.OpTaskEnqueue, abi.TaskEnqueueRequest{Action: "work"}); err == nil || !strings.Contains(err.Error(), "runs no background tasks") {
		t.Errorf("enqueue in a host without tasks: %v", err)
	}
}
