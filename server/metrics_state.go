package server

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector exports what the server holds rather than what it did:
// the task queue (by state, and how long the oldest due task has waited),
// live sessions, and the bytes of the compile and build caches. It reads
// them at scrape time, at most every stateEvery (the queue is a query,
// the caches a directory walk), so a scraper polling fast costs no more.
type stateCollector struct {
	s                                     *Server
	tasks, taskWait, sessions, cacheBytes *prometheus.Desc
	mu                                    sync.Mutex
	at                                    time.Time
	byState                               map[string]int64
	wait                                  time.Duration
	tasksOK                               bool
	compileBytes, buildBytes              int64
	walkedAt                              time.Time
}

const (
	stateEvery = 10 * time.Second
	cacheEvery = time.Minute
	// maxCacheWalk bounds the entries one cache walk visits: past it the
	// size is what was counted (a lower bound).
	maxCacheWalk = 200_000
)

func newStateCollector(s *Server) *stateCollector {
	return &stateCollector{s: s,
		tasks:      prometheus.NewDesc("moat_tasks", "Tasks in the queue by state (finished ones until tasks are pruned).", []string{"state"}, nil),
		taskWait:   prometheus.NewDesc("moat_task_queue_oldest_wait_seconds", "How long the oldest due queued task has waited (0: none waits).", nil, nil),
		sessions:   prometheus.NewDesc("moat_sessions_live", "Sessions live on this replica.", nil, nil),
		cacheBytes: prometheus.NewDesc("moat_cache_bytes", "Bytes of this replica's caches: compile (machine code, snapshot images) and build (compiled programs of code runs).", []string{"cache"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tasks
	ch <- c.taskWait
	ch <- c.sessions
	ch <- c.cacheBytes
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.at) >= stateEvery {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		by, wait, ok, err := c.s.store.TaskStats(ctx, now)
		cancel()
		if err == nil {
			c.byState, c.wait, c.tasksOK, c.at = by, wait, ok, now
		} else {
			c.s.log.Warn("metrics: task stats unavailable", "err", err)
		}
	}
	if now.Sub(c.walkedAt) >= cacheEvery {
		cache := c.s.cfg.CacheDir
		if cache == "" {
			cache = filepath.Join(c.s.cfg.DataDir, "cache")
		}
		c.compileBytes, c.buildBytes = dirBytes(cache), dirBytes(filepath.Join(c.s.cfg.DataDir, "build-cache"))
		c.walkedAt = now
	}
	if c.tasksOK {
		for _, st := range []string{abi.TaskQueued, abi.TaskRunning, abi.TaskDone, abi.TaskFailed, abi.TaskCancelled} {
			ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(c.byState[st]), st)
		}
		ch <- prometheus.MustNewConstMetric(c.taskWait, prometheus.GaugeValue, c.wait.Seconds())
	}
	if c.s.sessions != nil {
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(c.s.sessions.Live()))
	}
	ch <- prometheus.MustNewConstMetric(c.cacheBytes, prometheus.GaugeValue, float64(c.compileBytes), "compile")
	ch <- prometheus.MustNewConstMetric(c.cacheBytes, prometheus.GaugeValue, float64(c.buildBytes), "build")
}

// dirBytes is the size of the regular files under dir, walking at most
// maxCacheWalk entries; 0 for a directory that is not there.
func dirBytes(dir string) int64 {
	var n, seen int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > maxCacheWalk {
			return filepath.SkipAll
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
