package probe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultConcurrency is the number of probes [Workers] run at once when
// [WorkersOptions.Concurrency] is zero.
const DefaultConcurrency = 256

// ErrWorkersStarted is returned by [Workers.Run] when the pool already ran.
var ErrWorkersStarted = errors.New("workers already started")

// WorkersOptions configure [NewWorkers]. Prober, Target, Sink and Now are
// required; the other fields have defaults.
type WorkersOptions struct {
	// Prober runs the probes. When it is also a [Reporter], Report is called
	// instead of Probe so that OnReport sees the detail.
	Prober Prober
	// Target returns the destination of the target with the given id. It is
	// called on worker goroutines and must be safe for concurrent use. A
	// Target without an address means the target is gone: its request is
	// dropped and counted as abandoned.
	Target func(id uint32) Target
	// Sink receives one Result for every probe that ran to its end.
	Sink Sink
	// Now returns the scheduler's monotonic nanoseconds, the time base of
	// Request.Sent, Request.Deadline and Result.Done.
	Now func() int64
	// Concurrency is the number of worker goroutines, so the largest number
	// of probes in flight. Zero means DefaultConcurrency.
	Concurrency int
	// OnReport, when not nil, is called on the worker goroutine after every
	// probe, before the Result goes to Sink. r is valid only during the call.
	OnReport func(id uint32, r *Report)
}

// WorkerStats are the counters of a [Workers] pool. Counters only grow;
// InFlight and Pending are current values.
type WorkerStats struct {
	Queued      uint64 // requests accepted by Launch
	Started     uint64 // probes started
	Delivered   uint64 // results handed to the Sink
	SkippedLate uint64 // requests whose deadline had passed when a worker took them: delivered as LocalError (CauseLate)
	Abandoned   uint64 // requests dropped because the pool stopped (still queued, launched after the stop, or cut short by it) or their target is gone
	InFlight    int64  // probes running now
	Pending     int64  // requests waiting in the queue now
}

// Workers runs one-shot probes ([Prober]) for the scheduler: it is a
// [Launcher] that queues requests and runs them on a fixed pool of
// goroutines, so the number of goroutines depends on Concurrency, not on the
// number of targets or probes.
//
// Ownership: [Workers.Launch] may be called from any goroutine (scheduler
// shards); it only appends to the queue. [Workers.Run] owns the worker
// goroutines: it starts them, and they live until Run's context is done.
// Each worker owns the probe it runs and calls OnReport and Sink.Deliver.
// [Workers.Stats], [Workers.SetProber] and [Workers.SetConcurrency] may be
// called from any goroutine: a configuration reload changes a running pool
// with them, without stopping it or the probes it runs.
//
// Queue policy: the queue is unbounded, so Launch never blocks on probes and
// never loses a request. Its length is bounded in practice by the scheduler,
// which has at most about one outstanding request per target (24 bytes
// each); its memory is released when it drains after growing beyond
// 65536 requests. A request whose deadline has passed when a worker takes it
// is not probed: its worker delivers a LocalError (CauseLate), and the
// scheduler, which waits for the pool to settle ([Workers.Settled]) before
// it records a timeout, takes that instead of blaming the target.
type Workers struct {
	prober   atomic.Pointer[proberOf]
	target   func(uint32) Target
	sink     Sink
	now      func() int64
	onReport func(uint32, *Report)

	mu      sync.Mutex
	cond    sync.Cond // signalled when the queue gains requests, the pool shrinks or stops
	q       requestRing
	idle    int // workers waiting on cond
	n       int // workers wanted
	running int // worker goroutines alive
	state   poolState
	ctx     context.Context // Run's, while it runs
	wg      sync.WaitGroup  // worker goroutines

	queued, started, delivered, skippedLate, abandoned atomic.Uint64
	inFlight, pending                                  atomic.Int64

	// What Settled reads: the Sent of the oldest queued request
	// (math.MaxInt64 when none is queued), and each worker's slot, which
	// holds the deadline of the probe it runs (math.MaxInt64 when idle).
	// Both change under mu; the slot before the queue, so a reader that
	// loads the queue first never misses a request on its way between
	// them.
	oldestQueued atomic.Int64
	slots        atomic.Pointer[[]*workerSlot]
}

// workerSlot is one worker goroutine's probe deadline, for Settled.
type workerSlot struct {
	deadline atomic.Int64
	_        [56]byte // one cache line per worker
}

// proberOf is a prober and, when it is one, the same prober as a Reporter.
type proberOf struct {
	p Prober
	r Reporter
}

func newProberOf(p Prober) *proberOf {
	r, _ := p.(Reporter)
	return &proberOf{p: p, r: r}
}

type poolState uint8

const (
	poolNew poolState = iota
	poolRunning
	poolStopped
)

var (
	_ Launcher = (*Workers)(nil)
	_ Settler  = (*Workers)(nil)
)

// NewWorkers returns a pool for o. Probes start once [Workers.Run] runs;
// requests launched before are queued.
func NewWorkers(o WorkersOptions) (*Workers, error) {
	switch {
	case o.Prober == nil:
		return nil, errors.New("new workers: prober is nil")
	case o.Target == nil:
		return nil, errors.New("new workers: target function is nil")
	case o.Sink == nil:
		return nil, errors.New("new workers: sink is nil")
	case o.Now == nil:
		return nil, errors.New("new workers: now function is nil")
	case o.Concurrency < 0:
		return nil, fmt.Errorf("new workers: concurrency %d is negative", o.Concurrency)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	w := &Workers{
		target:   o.Target,
		sink:     o.Sink,
		now:      o.Now,
		onReport: o.OnReport,
		n:        o.Concurrency,
	}
	w.prober.Store(newProberOf(o.Prober))
	w.cond.L = &w.mu
	w.oldestQueued.Store(math.MaxInt64)
	w.slots.Store(new([]*workerSlot))
	return w, nil
}

// SetProber makes p run the probes that start from now on; probes running
// finish with the prober they started with.
func (w *Workers) SetProber(p Prober) { w.prober.Store(newProberOf(p)) }

// SetConcurrency sets the number of worker goroutines, at least 1 (0 means
// DefaultConcurrency). A running pool starts the extra workers at once; when
// it shrinks, workers leave as they finish their probe.
func (w *Workers) SetConcurrency(n int) {
	if n <= 0 {
		n = DefaultConcurrency
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n = n
	if w.state != poolRunning {
		return
	}
	w.spawn()
	if w.running > w.n {
		w.cond.Broadcast()
	}
}

// spawn starts workers until w.n run. It is called with w.mu held, while
// the pool runs.
func (w *Workers) spawn() {
	for ; w.running < w.n; w.running++ {
		slot := &workerSlot{}
		slot.deadline.Store(math.MaxInt64)
		slots := append(slices.Clone(*w.slots.Load()), slot)
		w.slots.Store(&slots)
		w.wg.Go(func() { w.work(w.ctx, slot) })
	}
}

// retire removes a leaving worker's slot. It is called with w.mu held.
func (w *Workers) retire(slot *workerSlot) {
	slots := slices.DeleteFunc(slices.Clone(*w.slots.Load()), func(s *workerSlot) bool { return s == slot })
	w.slots.Store(&slots)
	w.running--
}

// Launch queues batch for the workers and returns at once. lane is not used:
// all lanes share one queue. After the pool stopped, requests are counted as
// abandoned and dropped.
func (w *Workers) Launch(_ int, batch []Request) {
	if len(batch) == 0 {
		return
	}
	w.mu.Lock()
	if w.state == poolStopped {
		w.mu.Unlock()
		w.abandoned.Add(uint64(len(batch)))
		return
	}
	if w.q.len() == 0 {
		w.oldestQueued.Store(batch[0].Sent)
	}
	for _, r := range batch {
		w.q.push(r)
	}
	w.pending.Add(int64(len(batch)))
	wake := min(w.idle, len(batch))
	w.mu.Unlock()
	w.queued.Add(uint64(len(batch)))
	for range wake {
		w.cond.Signal()
	}
}

// Run starts the worker goroutines and blocks until ctx is done and every
// worker has returned. Probes in flight see ctx cancelled; their results and
// the requests still queued are dropped and counted as abandoned. Run may be
// called once; it returns ErrWorkersStarted after that, and nil otherwise.
func (w *Workers) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.state != poolNew {
		w.mu.Unlock()
		return ErrWorkersStarted
	}
	w.state = poolRunning
	w.ctx = ctx
	w.spawn()
	w.mu.Unlock()

	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.state = poolStopped
		w.mu.Unlock()
		w.cond.Broadcast()
	})
	defer stop()

	w.wg.Wait()

	w.mu.Lock()
	w.state = poolStopped // workers may have seen ctx before the AfterFunc ran
	left := w.q.len()
	w.q = requestRing{}
	w.oldestQueued.Store(math.MaxInt64)
	w.pending.Add(-int64(left))
	w.mu.Unlock()
	w.abandoned.Add(uint64(left))
	return nil
}

// Stats returns the pool's counters.
func (w *Workers) Stats() WorkerStats {
	return WorkerStats{
		Queued:      w.queued.Load(),
		Started:     w.started.Load(),
		Delivered:   w.delivered.Load(),
		SkippedLate: w.skippedLate.Load(),
		Abandoned:   w.abandoned.Load(),
		InFlight:    w.inFlight.Load(),
		Pending:     w.pending.Load(),
	}
}

// work is one worker goroutine's loop. rep is reused from probe to probe.
func (w *Workers) work(ctx context.Context, slot *workerSlot) {
	var rep Report
	for {
		req, ok := w.next(slot)
		if !ok {
			return
		}
		if ctx.Err() != nil { // stopping: the pool state may not say so yet
			w.abandoned.Add(1)
			w.mu.Lock()
			w.retire(slot)
			w.mu.Unlock()
			return
		}
		w.run(ctx, req, &rep)
		slot.deadline.Store(math.MaxInt64)
	}
}

// next waits for a request and puts its deadline in the worker's slot; it
// returns false when the pool stops or has a worker too many, and the
// worker then ends.
func (w *Workers) next(slot *workerSlot) (Request, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.q.len() == 0 && w.state == poolRunning && w.running <= w.n {
		w.idle++
		w.cond.Wait()
		w.idle--
	}
	if w.state != poolRunning || w.running > w.n {
		w.retire(slot)
		return Request{}, false
	}
	w.pending.Add(-1)
	req := w.q.pop()
	slot.deadline.Store(req.Deadline)
	if w.q.len() == 0 {
		w.oldestQueued.Store(math.MaxInt64)
	} else {
		w.oldestQueued.Store(w.q.front().Sent)
	}
	return req, true
}

// Settled returns the time up to which every result of the pool's probes
// has been delivered (see [Settler]): just before the send time of the
// oldest request still queued, and before the deadline of every probe
// running; now when there are none. A request that waits in the queue past
// its deadline is therefore never counted as a timeout by the scheduler: its
// worker reports it as a LocalError (CauseLate) instead.
func (w *Workers) Settled() int64 {
	at := w.oldestQueued.Load() // first: see Workers.oldestQueued
	for _, s := range *w.slots.Load() {
		at = min(at, s.deadline.Load())
	}
	if at == math.MaxInt64 {
		return w.now()
	}
	return at - 1
}

// Expired has nothing to add: a worker reports its own late probes.
func (w *Workers) Expired(Request) LocalCause { return CauseNone }

// run probes one request and delivers its result. A probe this host could
// not give its time to is a LocalError (CauseLate), no verdict on the
// target: one taken from the queue at or after its deadline, or one that
// timed out after it started late (past half its time) or after its worker
// noticed the deadline late (by more than lateWake).
func (w *Workers) run(ctx context.Context, req Request, rep *Report) {
	now := w.now()
	if now >= req.Deadline {
		w.skippedLate.Add(1)
		w.deliverLate(req, now)
		return
	}
	t := w.target(req.ID)
	if !t.Addr.IsValid() {
		w.abandoned.Add(1)
		return
	}
	w.started.Add(1)
	w.inFlight.Add(1)
	defer w.inFlight.Add(-1)

	pctx, cancel := context.WithTimeout(ctx, time.Duration(req.Deadline-now))
	*rep = w.probe(pctx, t)
	cancel()
	if ctx.Err() != nil && !rep.Outcome.Healthy() {
		// The failure may be the shutdown's doing: not a verdict on the target.
		w.abandoned.Add(1)
		return
	}
	done := w.now()
	if rep.Outcome == Timeout && (now-req.Sent > (req.Deadline-req.Sent)/2 || done-req.Deadline > int64(lateWake)) {
		rep.Outcome, rep.Cause = LocalError, CauseLate
		rep.Err = fmt.Errorf("this host started the probe %v after it was due and saw its end %v after its deadline: too busy to judge the target (%w)",
			time.Duration(now-req.Sent), time.Duration(max(done-req.Deadline, 0)), cmp.Or(rep.Err, context.DeadlineExceeded))
	}
	rep.ID, rep.Gen, rep.Done = req.ID, req.Gen, done
	if w.onReport != nil {
		w.onReport(req.ID, rep)
	}
	w.sink.Deliver(rep.Result)
	w.delivered.Add(1)
}

// probe runs the current prober, through Report when it has one.
func (w *Workers) probe(ctx context.Context, t Target) Report {
	p := w.prober.Load()
	if p.r != nil {
		return p.r.Report(ctx, t)
	}
	return Report{Result: p.p.Probe(ctx, t)}
}

// lateWake is how long after a probe's deadline its worker may notice the
// timeout before the host counts as too busy to judge the probe. The
// runtime's timers fire within microseconds on a machine with CPU to spare.
const lateWake = 100 * time.Millisecond

// deliverLate delivers the LocalError of a request taken from the queue at
// or after its deadline, at now.
func (w *Workers) deliverLate(req Request, now int64) {
	w.sink.Deliver(Result{ID: req.ID, Gen: req.Gen, Outcome: LocalError, Cause: CauseLate, Done: now})
	w.delivered.Add(1)
}

// shrinkAbove is the capacity beyond which an emptied queue frees its memory.
const shrinkAbove = 1 << 16

// requestRing is a growable FIFO ring of requests. Its capacity is zero or a
// power of two. It is not safe for concurrent use.
type requestRing struct {
	buf  []Request
	head int
	n    int
}

func (r *requestRing) len() int { return r.n }

func (r *requestRing) push(x Request) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = x
	r.n++
}

// front returns the oldest request; the ring must not be empty.
func (r *requestRing) front() Request { return r.buf[r.head] }

func (r *requestRing) pop() Request {
	x := r.buf[r.head]
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.head = 0
		if len(r.buf) > shrinkAbove {
			r.buf = nil
		}
	}
	return x
}

func (r *requestRing) grow() {
	size := max(2*len(r.buf), 256)
	buf := make([]Request, size)
	k := copy(buf, r.buf[r.head:])
	copy(buf[k:], r.buf[:r.head])
	r.buf, r.head = buf, 0
}
