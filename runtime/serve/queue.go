package serve

import (
	"container/list"
	"context"
	"sync"
)

// queue is the bounded FIFO of generation jobs waiting for the model. One worker pops; any
// number of handlers push and, when their client goes away before the job starts, remove
// their job again, so a vanished client never holds a place (a full queue means max live
// waiters, not max waiters ever).
type queue struct {
	mu     sync.Mutex
	items  list.List // of *job, oldest first
	max    int       // most waiting jobs (the running one is not counted)
	busy   bool      // the worker runs a job (between pop and done)
	notify chan struct{}
}

func newQueue(max int) *queue {
	return &queue{max: max, notify: make(chan struct{}, 1)}
}

// push appends j and returns true, or returns false when max jobs are already waiting (a job
// that will run at once because the worker is idle does not wait).
func (q *queue) push(j *job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	places := q.max
	if !q.busy {
		places++
	}
	if q.items.Len() >= places {
		return false
	}
	j.elem = q.items.PushBack(j)
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return true
}

// remove takes j out of the queue if it is still waiting and reports whether it was.
func (q *queue) remove(j *job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if j.elem == nil {
		return false
	}
	q.items.Remove(j.elem)
	j.elem = nil
	return true
}

// len returns the number of waiting jobs.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.items.Len()
}

// pop waits for the oldest job and removes it, marking the worker busy until done; nil when
// ctx is done.
func (q *queue) pop(ctx context.Context) *job {
	for {
		q.mu.Lock()
		if e := q.items.Front(); e != nil {
			j := q.items.Remove(e).(*job)
			j.elem = nil
			q.busy = true
			q.mu.Unlock()
			return j
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil
		}
	}
}

// done marks the worker idle again.
func (q *queue) done() {
	q.mu.Lock()
	q.busy = false
	q.mu.Unlock()
}
