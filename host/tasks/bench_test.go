package tasks_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/host/tasks"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// BenchmarkTaskEnqueueToStart measures how long a task waits between
// its enqueue (store.TaskEnqueue returning, as task.enqueue does) and
// the start of its attempt on a runner in the same process, one task at
// a time: the claim, the lease, resolving the module. The runner is woken
// by the enqueue, so this is the queue's own latency; a task enqueued on
// another replica waits for the runner's next poll as well (Poll, 1s by
// default). ns/op is the mean; p50-µs and p99-µs the distribution.
func BenchmarkTaskEnqueueToStart(b *testing.B) {
	for _, backend := range []struct {
		name string
		loc  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return b.TempDir() }},
		{"postgres", func(b *testing.B) string { return pgtest.Database(b) }},
	} {
		b.Run(backend.name, func(b *testing.B) {
			ctx := context.Background()
			st, err := store.Open(ctx, backend.loc(b))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			p, err := policy.ParseProfile("tasks.yaml", []byte(taskProfile))
			if err != nil {
				b.Fatal(err)
			}
			h, err := host.New(ctx, host.Config{DataDir: b.TempDir(), Store: st, Profile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				OmitAllowedInvocationAudit: true})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(ctx)
			mf, err := policy.ParseManifest("moat.yaml", []byte("name: tasker"+taskManifest))
			if err != nil {
				b.Fatal(err)
			}
			m, err := h.Load(ctx, testwasm.BuildGo(b, "./testdata/taskguest", true), host.LoadOptions{Manifest: mf})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(ctx)
			started := make(chan time.Time, 1)
			r, err := tasks.New(tasks.Config{Store: st, Logger: slog.New(slog.DiscardHandler),
				Resolve: func(context.Context, string, string) (*host.Module, error) { return m, nil },
				OnStart: func(*store.Task) { started <- time.Now() }})
			if err != nil {
				b.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.Run(rctx)
			}()
			defer func() {
				stop()
				<-done
			}()
			task := store.NewTask{Org: "acme", Module: "tasker", Action: "runs", Input: []byte("bench"), User: "ann"}
			waits := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				if _, _, err := st.TaskEnqueue(ctx, task, 0); err != nil {
					b.Fatal(err)
				}
				enqueued := time.Now()
				select {
				case at := <-started:
					waits = append(waits, at.Sub(enqueued))
				case <-time.After(10 * time.Second):
					b.Fatal("the task did not start within 10s")
				}
			}
			b.StopTimer()
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-µs")
		})
	}
}
