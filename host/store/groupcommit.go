package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// Group commit of kv writes.
//
// A small kv write costs little to apply and a lot to commit: on SQLite
// the commit appends every page it dirtied to the WAL (a syscall or two a
// page), on PostgreSQL it waits for the WAL flush. When the backend can
// commit many writes in one transaction (driver.KVBatcher), every
// KVPut, KVPutWithin and KVDelete goes through one writer goroutine: it
// takes the writes queued by concurrent callers (without waiting for more:
// the batch is whatever arrived while the previous one committed, so a
// lone caller pays no delay), applies them in the order they were queued
// in one transaction, commits, and only then wakes each caller with its
// own result. Durability is not traded away: a call returns nil only after
// the commit that holds its write, a failed commit fails every write of
// the batch, and a put its quota refuses (or whose statement fails) fails
// only its own caller.

// maxKVBatch bounds the writes of one group commit, so one transaction
// holds the write lock for a bounded time.
const maxKVBatch = 128

// kvBatchTimeout bounds one group commit. SQLite waits at most its busy
// timeout (5 s) for the file lock; PostgreSQL may wait on another
// replica's row lock, or on a network that stopped answering.
const kvBatchTimeout = 30 * time.Second

// errStoreClosed is returned by a kv write made after Close.
var errStoreClosed = errors.New("the store is closed")

// States of a kvReq: a caller whose context ends while its write waits in
// the queue abandons it (the writer then skips it, and the caller gets
// its context's error); once the writer has taken it, the caller waits for
// the outcome of the commit, so no caller is told a write failed that was
// in fact committed.
const (
	reqPending int32 = iota
	reqTaken
	reqAbandoned
)

type kvReq struct {
	w     driver.KVWrite
	state atomic.Int32
	done  chan error // buffered (1): the writer never waits for the caller
}

var kvReqs = sync.Pool{New: func() any { return &kvReq{done: make(chan error, 1)} }}

// kvWriter is the group-commit writer of one Store.
type kvWriter struct {
	b     driver.KVBatcher
	queue chan *kvReq
	stop  chan struct{} // closed by Close: take no more writes
	done  chan struct{} // closed when the writer has returned
	once  sync.Once

	groups, writes atomic.Int64 // transactions begun, and the writes they held
}

func newKVWriter(b driver.KVBatcher) *kvWriter {
	w := &kvWriter{b: b, queue: make(chan *kvReq, maxKVBatch), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// write queues kw and returns it with its results once the transaction
// holding it has committed (or failed).
func (w *kvWriter) write(ctx context.Context, kw driver.KVWrite) (driver.KVWrite, error) {
	if err := ctx.Err(); err != nil {
		return kw, err
	}
	r := kvReqs.Get().(*kvReq)
	r.w = kw
	r.state.Store(reqPending)
	select {
	case w.queue <- r:
	case <-w.stop:
		kvReqs.Put(r)
		return kw, errStoreClosed
	case <-ctx.Done():
		kvReqs.Put(r)
		return kw, ctx.Err()
	}
	var err error
	select {
	case err = <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqPending, reqAbandoned) {
			return kw, ctx.Err() // the writer will skip it, and owns r now
		}
		err = <-r.done
	case <-w.done:
		// The writer sends every outcome before it returns; a write
		// queued after its last look at the queue has none.
		select {
		case err = <-r.done:
		default:
			if r.state.CompareAndSwap(reqPending, reqAbandoned) {
				return kw, errStoreClosed
			}
			err = <-r.done
		}
	}
	res := r.w
	r.w = driver.KVWrite{}
	kvReqs.Put(r)
	return res, err
}

// close stops taking writes, commits those already queued, and waits for
// the writer to return.
func (w *kvWriter) close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *kvWriter) run() {
	defer close(w.done)
	batch := make([]*kvReq, 0, maxKVBatch)
	writes := make([]driver.KVWrite, 0, maxKVBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-w.queue:
			batch = append(batch, r)
		case <-w.stop:
			// Commit what is queued, then return; a write queued after
			// this is refused by its caller (see write).
			for {
				batch = batch[:0]
			drain:
				for len(batch) < maxKVBatch {
					select {
					case r := <-w.queue:
						batch = append(batch, r)
					default:
						break drain
					}
				}
				if len(batch) == 0 {
					return
				}
				writes = w.commit(batch, writes)
			}
		}
	more:
		for len(batch) < maxKVBatch {
			select {
			case r := <-w.queue:
				batch = append(batch, r)
			default:
				break more
			}
		}
		writes = w.commit(batch, writes)
	}
}

// commit runs one group commit of the batch's writes that are still
// wanted, and wakes each of their callers. A write whose statement fails
// (a *driver.WriteError) fails alone: the others are committed again
// without it.
func (w *kvWriter) commit(batch []*kvReq, writes []driver.KVWrite) []driver.KVWrite {
	live := batch[:0]
	for _, r := range batch {
		if r.state.CompareAndSwap(reqPending, reqTaken) {
			live = append(live, r)
		}
	}
	for len(live) > 0 {
		w.groups.Add(1)
		w.writes.Add(int64(len(live)))
		writes = writes[:0]
		for _, r := range live {
			writes = append(writes, r.w)
		}
		// The batch belongs to no single caller: no caller's deadline
		// may cut it short once the others are in it; its own bound
		// keeps a database that stops answering from holding every
		// caller for ever.
		ctx, cancel := context.WithTimeout(context.Background(), kvBatchTimeout)
		err := w.b.KVWriteBatch(ctx, writes)
		cancel()
		var we *driver.WriteError
		if errors.As(err, &we) && we.Index >= 0 && we.Index < len(live) {
			live[we.Index].done <- we.Err
			live = append(live[:we.Index], live[we.Index+1:]...)
			continue
		}
		for i, r := range live {
			if err != nil {
				r.done <- err
				continue
			}
			r.w = writes[i]
			r.done <- writes[i].Err
		}
		break
	}
	clear(writes[:cap(writes)])
	return writes[:0]
}

// GroupCommitStats reports how many group commits of kv writes the store
// has begun and how many writes they held (writes/groups is the mean
// group size; both are 0 for a backend without group commit). A group
// retried without a failed write counts again.
func (s *Store) GroupCommitStats() (groups, writes int64) {
	if s.kw == nil {
		return 0, 0
	}
	return s.kw.groups.Load(), s.kw.writes.Load()
}
