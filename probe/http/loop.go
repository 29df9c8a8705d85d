package http

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
)

// ErrLoopsStarted is returned by [Loops.Run] when the loops already ran.
var ErrLoopsStarted = errors.New("http event loops already started")

// LoopOptions configure [NewLoops]. Target, Sink and Now are required.
type LoopOptions struct {
	// Target returns the destination of the target with the given id; a
	// Target without an address means the target is gone: its request is
	// dropped and counted as abandoned. It is called on the loops'
	// goroutines and must be safe for concurrent use.
	Target func(id uint32) probe.Target
	// Sink receives one Result for every probe that ran to its end.
	Sink probe.Sink
	// Now returns the scheduler's monotonic nanoseconds, the time base of
	// Request.Sent, Request.Deadline and Result.Done.
	Now func() int64
	// OnReport, when not nil, is called on a loop's goroutine after every
	// probe, before the Result goes to Sink. r is valid only during the call.
	OnReport func(id uint32, r *probe.Report)
	// Loops is the number of event loops; zero means GOMAXPROCS.
	Loops int
	// NoRing makes the loops poll their sockets with epoll even where the
	// kernel offers io_uring (see [Loops]).
	NoRing bool

	ringFiles int // direct sockets per ring; zero: ringFiles (tests lower it)
}

// Loops runs plain-HTTP and TCP connect() probes on a few event loops, one
// goroutine per loop, with no goroutine, timer or allocation per probe.
// Checks launch their probes through a [LoopLauncher] each
// ([Loops.Launcher], [Loops.ConnectLauncher]); the loops are shared by all
// of them.
//
// Each loop drives its sockets through an io_uring (kernel 6.11 or later,
// io_uring allowed): a probe's socket, connect, send and recv go to the
// kernel as one linked chain, submitted with the chains of other probes in
// one system call (see loopring.go). Where the kernel refuses a ring
// (io_uring_disabled, a seccomp filter, an older kernel) or
// [LoopOptions.NoRing] is set, a loop polls non-blocking sockets with epoll
// instead, a system call per step; [Loops.Engine] tells which and why.
// Both give the same results, errors and timings.
//
// A loop with nothing to do parks its goroutine on the Go runtime's poller,
// which watches the loop's eventfd (ring) or epoll descriptor, instead of
// blocking in a system call: a blocked call would make the runtime hand
// the loop's P to another thread and keep sysmon waking every 20 µs to do
// so.
//
// Ownership: each loop goroutine owns its connections, their buffers and
// its deadline heap; others hand it requests through its inbox, a slice
// behind a mutex taken once per batch, and wake it through an eventfd when
// it sleeps. [Loops.Run] owns the goroutines.
type Loops struct {
	opt     LoopOptions
	loops   []*loop
	ringErr error         // why the loops poll with epoll; nil on io_uring
	next    atomic.Uint32 // round-robin over loops, per batch
	state   atomic.Uint32 // loopsNew, loopsRunning, loopsStopped
}

const (
	loopsNew uint32 = iota
	loopsRunning
	loopsStopped
)

// NewLoops creates the event loops of o (their epoll and eventfd
// descriptors); they start probing when [Loops.Run] runs, and requests
// launched before wait for it.
func NewLoops(o LoopOptions) (*Loops, error) {
	switch {
	case o.Target == nil:
		return nil, errors.New("new http loops: target function is nil")
	case o.Sink == nil:
		return nil, errors.New("new http loops: sink is nil")
	case o.Now == nil:
		return nil, errors.New("new http loops: now function is nil")
	case o.Loops < 0:
		return nil, fmt.Errorf("new http loops: %d loops is negative", o.Loops)
	}
	if o.Loops == 0 {
		o.Loops = runtime.GOMAXPROCS(0)
	}
	ls := &Loops{opt: o}
	for range o.Loops {
		l, err := newLoop(ls)
		if err != nil {
			ls.closeFDs()
			return nil, fmt.Errorf("new http loops: %w", err)
		}
		ls.loops = append(ls.loops, l)
	}
	return ls, nil
}

// Engine names what drives the loops' sockets, "io_uring" or "epoll" (or
// "io_uring+epoll" when the kernel refused a ring to a later loop only),
// and the reason the kernel gave for refusing a ring (nil when NoRing
// asked for epoll).
func (ls *Loops) Engine() (string, error) {
	rings := 0
	for _, l := range ls.loops {
		if l.ring != nil {
			rings++
		}
	}
	switch rings {
	case len(ls.loops):
		return "io_uring", nil
	case 0:
		return "epoll", ls.ringErr
	}
	return "io_uring+epoll", ls.ringErr
}

// closeFDs closes every loop's descriptors; their goroutines have ended.
func (ls *Loops) closeFDs() {
	for _, l := range ls.loops {
		l.close()
	}
}

// Run runs the loops until ctx is done, then closes every connection in
// flight (their probes are abandoned) and the loops' descriptors. It may
// be called once; it returns ErrLoopsStarted after that.
func (ls *Loops) Run(ctx context.Context) error {
	if !ls.state.CompareAndSwap(loopsNew, loopsRunning) {
		return ErrLoopsStarted
	}
	stop := context.AfterFunc(ctx, func() {
		ls.state.Store(loopsStopped)
		for _, l := range ls.loops {
			l.wake()
		}
	})
	defer stop()
	var wg sync.WaitGroup
	for _, l := range ls.loops {
		wg.Go(l.run)
	}
	wg.Wait()
	ls.state.Store(loopsStopped)
	ls.closeFDs()
	return nil
}

// Launcher returns a launcher of p's probes on the loops. p must probe
// plain HTTP (HTTPS stays on [probe.Workers]: see [Prober.Loopable]).
func (ls *Loops) Launcher(p *Prober) (*LoopLauncher, error) {
	if !p.Loopable() {
		return nil, errors.New("http loops: only plain-HTTP probers run on the event loops")
	}
	l := &LoopLauncher{ls: ls}
	l.prober.Store(p)
	return l, nil
}

// ConnectLauncher returns a launcher of TCP connect() probes on the loops,
// from source (the zero Addr: the kernel chooses), with the semantics of
// the connect() prober (T1–T4): an established connection is success and
// is closed at once with an RST, no data sent; an RST is refused; silence
// until the deadline a timeout; a failure of this host's own (descriptors,
// local ports, buffers) a LocalError. Latency and Phases.Connect are both
// the time from connect() to the answer, or to the deadline.
func (ls *Loops) ConnectLauncher(source netip.Addr) *LoopLauncher {
	l := &LoopLauncher{ls: ls}
	l.SetSource(source)
	return l
}

// SetSource makes a launcher of [Loops.ConnectLauncher] send the probes
// that start from now on from source. It does nothing on an HTTP launcher,
// whose source is its prober's.
func (l *LoopLauncher) SetSource(source netip.Addr) {
	if l.prober.Load() == nil {
		l.source.Store(&source)
	}
}

// Loopable reports whether p's probes can run on [Loops]: plain HTTP.
func (p *Prober) Loopable() bool { return p.tls == nil }

// stopping reports whether the loops are to stop.
func (ls *Loops) stopping() bool { return ls.state.Load() == loopsStopped }

// LoopLauncher launches one check's probes on [Loops]: it is the check's
// [probe.Launcher] and [probe.Settler]. Launch, Settled, Expired, Stats,
// SetProber and Stop are safe for concurrent use.
type LoopLauncher struct {
	ls      *Loops
	prober  atomic.Pointer[Prober]     // nil: a launcher of connect() probes
	source  atomic.Pointer[netip.Addr] // of connect() probes
	stopped atomic.Bool

	queued, started, delivered, skippedLate, abandoned atomic.Uint64
	inFlight, pending                                  atomic.Int64
}

var (
	_ probe.Launcher = (*LoopLauncher)(nil)
	_ probe.Settler  = (*LoopLauncher)(nil)
)

// SetProber makes p run the probes that start from now on; probes in
// flight finish with the prober they started with. p must be
// [Prober.Loopable], and l a launcher of HTTP probes ([Loops.Launcher]).
func (l *LoopLauncher) SetProber(p *Prober) error {
	if !p.Loopable() {
		return errors.New("http loops: only plain-HTTP probers run on the event loops")
	}
	if l.prober.Load() == nil {
		return errors.New("http loops: a launcher of connect() probes takes no HTTP prober")
	}
	l.prober.Store(p)
	return nil
}

// Stop ends the launcher: requests launched after, still queued or in
// flight are dropped and counted as abandoned, as a stopped
// [probe.Workers] pool does.
func (l *LoopLauncher) Stop() { l.stopped.Store(true) }

// Launch hands batch to one of the loops, round robin, and returns at once.
// A request whose deadline has passed when its loop takes it is delivered
// as a LocalError (CauseLate), as [probe.Workers] does. lane is not used.
func (l *LoopLauncher) Launch(_ int, batch []probe.Request) {
	if len(batch) == 0 {
		return
	}
	if l.stopped.Load() || l.ls.stopping() {
		l.abandoned.Add(uint64(len(batch)))
		return
	}
	l.queued.Add(uint64(len(batch)))
	l.pending.Add(int64(len(batch)))
	lp := l.ls.loops[int(l.ls.next.Add(1))%len(l.ls.loops)]
	lp.post(l, batch)
}

// Settled returns the time up to which every result of the launcher's
// probes has been delivered (see [probe.Settler]): the last time each loop
// finished expiring its deadlines, or now for a loop with nothing to do,
// and before the oldest request still in a loop's inbox.
func (l *LoopLauncher) Settled() int64 {
	at := int64(math.MaxInt64)
	now := l.ls.opt.Now()
	for _, lp := range l.ls.loops {
		at = min(at, lp.oldest.Load()-1) // first: see loop.post
		if lp.idle.Load() {
			at = min(at, now)
		} else {
			at = min(at, lp.settled.Load())
		}
	}
	return at
}

// Expired has nothing to add: the loops report their own late probes.
func (l *LoopLauncher) Expired(probe.Request) probe.LocalCause { return probe.CauseNone }

// Stats returns the launcher's counters, in the shape of a worker pool's.
func (l *LoopLauncher) Stats() probe.WorkerStats {
	return probe.WorkerStats{
		Queued:      l.queued.Load(),
		Started:     l.started.Load(),
		Delivered:   l.delivered.Load(),
		SkippedLate: l.skippedLate.Load(),
		Abandoned:   l.abandoned.Load(),
		InFlight:    l.inFlight.Load(),
		Pending:     l.pending.Load(),
	}
}

// job is a request and the launcher it came from.
type job struct {
	req probe.Request
	l   *LoopLauncher
}

// maxEvents is how many epoll events a loop takes per wait.
const maxEvents = 256

// loop is one event loop: an io_uring or an epoll instance, the connections
// it drives and their deadlines. Fields after the inbox are owned by the
// loop's goroutine.
type loop struct {
	ls   *Loops
	ring *ring // nil: epoll
	epfd int
	evfd int // eventfd: written to wake the loop, and by the kernel on a ring's completions
	// file is epfd, or evfd on a ring, polled by the runtime when the loop
	// parks (rc.Read with poll, which leaves the number of ready epoll
	// events in polled).
	file   *os.File
	rc     syscall.RawConn
	poll   func(fd uintptr) bool
	polled int

	mu     sync.Mutex
	inbox  []job        // guarded by mu
	oldest atomic.Int64 // Sent of the oldest request in the inbox, MaxInt64 when empty
	// sleeping is set while the loop waits in epoll with an empty inbox;
	// idle while it also has no connection.
	sleeping, idle atomic.Bool
	settled        atomic.Int64 // scheduler time up to which every deadline has been handled

	work   []job // the inbox, swapped out
	conns  []*conn
	free   []int32 // indexes of free conns
	timers timerHeap
	events [maxEvents]unix.EpollEvent
	big    [][]byte // free head buffers of maxHeaderBytes
	rep    probe.Report
	dst    rawSockaddr
	src4   unix.SockaddrInet4
	src6   unix.SockaddrInet6
	ev     unix.EpollEvent

	closing   []int32  // ring: connections whose close found the ring full
	submitErr error    // ring: the last failure to submit
	scratch   [64]byte // ring: the recv after a complete response reads here, and drops it
}

// wakeIndex is the epoll data of a loop's eventfd.
const wakeIndex = -1

func newLoop(ls *Loops) (*loop, error) {
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	l := &loop{ls: ls, epfd: -1, evfd: evfd}
	l.timers.conns = &l.conns
	l.oldest.Store(math.MaxInt64)
	l.idle.Store(true)
	if !ls.opt.NoRing && ls.ringErr == nil {
		files := ls.opt.ringFiles
		if files == 0 {
			files = ringFiles
		}
		if l.ring, err = newRing(ringEntries, files, evfd); err != nil {
			ls.ringErr = err
		}
	}
	if l.ring == nil {
		return l, l.newEpoll()
	}
	// The runtime's poller watches the eventfd, edge-triggered: every
	// write, the kernel's on a completion or post's, is an event, and the
	// counter need not be read back (it would take 2^64 to fill).
	if err := l.pollOn(os.NewFile(uintptr(evfd), "http-loop-eventfd")); err != nil {
		l.close()
		return nil, err
	}
	l.poll = func(uintptr) bool {
		return l.ring.ready() || l.oldest.Load() != math.MaxInt64 || l.ls.stopping()
	}
	return l, nil
}

// pollOn makes f, a non-blocking descriptor, the file the loop parks on.
func (l *loop) pollOn(f *os.File) error {
	l.file = f
	if err := f.SetReadDeadline(time.Time{}); err != nil { // ErrNoDeadline: not on the runtime's poller
		return fmt.Errorf("loop descriptor: %w", err)
	}
	var err error
	if l.rc, err = f.SyscallConn(); err != nil {
		return fmt.Errorf("loop descriptor: %w", err)
	}
	return nil
}

// newEpoll sets up an epoll loop: an epoll instance watching the eventfd.
func (l *loop) newEpoll() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		l.close()
		return fmt.Errorf("epoll_create1: %w", err)
	}
	l.epfd = epfd
	if err := unix.SetNonblock(epfd, true); err != nil { // so that os.NewFile gives it to the runtime's poller
		l.close()
		return fmt.Errorf("epoll descriptor: %w", err)
	}
	if err := l.pollOn(os.NewFile(uintptr(epfd), "http-loop-epoll")); err != nil {
		l.close()
		return err
	}
	l.poll = func(uintptr) bool {
		l.polled = l.pollNow()
		return l.polled > 0
	}
	// Edge-triggered: every write is an event, and the counter need not be
	// read back (it would take 2^64 wakes to fill).
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: wakeIndex}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, l.evfd, &ev); err != nil {
		l.close()
		return fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	return nil
}

// close closes the loop's descriptors: the ring first, which unregisters
// the eventfd it signals.
func (l *loop) close() {
	if l.ring != nil {
		l.ring.close()
	}
	switch {
	case l.file != nil:
		_ = l.file.Close() // and epfd, or evfd on a ring, with it
	case l.epfd >= 0:
		_ = unix.Close(l.epfd)
	}
	if l.evfd >= 0 && (l.ring == nil || l.file == nil) {
		_ = unix.Close(l.evfd)
	}
}

// post appends a batch to the inbox and wakes the loop if it sleeps. The
// oldest request's Sent is stored before the requests can be taken, so a
// Settled that reads it first never misses one.
func (l *loop) post(from *LoopLauncher, batch []probe.Request) {
	l.mu.Lock()
	if len(l.inbox) == 0 {
		l.oldest.Store(batch[0].Sent)
	}
	for _, r := range batch {
		l.inbox = append(l.inbox, job{req: r, l: from})
	}
	l.mu.Unlock()
	if l.sleeping.Load() {
		l.wake()
	}
}

// wake makes the loop's epoll_wait return.
func (l *loop) wake() {
	one := [8]byte{1}
	_, _ = rawWrite(l.evfd, one[:]) // fails only when the counter is full: then it is readable anyway
}

// run is the loop's goroutine.
func (l *loop) run() {
	if l.ring != nil {
		l.runRing()
		return
	}
	for !l.ls.stopping() {
		l.takeInbox()
		n := l.wait()
		for i := range n {
			e := &l.events[i]
			if e.Fd == wakeIndex {
				continue
			}
			if c := l.conns[e.Fd]; c.state != stateFree && c.seq == e.Pad {
				l.handle(c, e.Events, probe.Nanotime()) // per event: a batch takes time to handle
			}
		}
		l.expire()
	}
	l.takeInbox()
	for _, c := range l.conns {
		if c.state != stateFree {
			l.abandon(c)
		}
	}
}

// wait returns the number of events in l.events: at once when some are
// ready, else once one is, a request is posted or the next deadline comes
// (see [loop.sleep]).
func (l *loop) wait() int {
	if n := l.pollNow(); n > 0 {
		return n
	}
	if l.sleep() {
		return l.polled
	}
	return 0
}

// sleep parks the loop's goroutine on the runtime's poller until its file
// is ready (l.poll says so), a request is posted, the loops stop or the
// next deadline comes; it reports whether the file was ready. It does not
// park when a deadline has passed or a request waits. On a ring, the
// kernel signals the eventfd of completions only meanwhile.
func (l *loop) sleep() bool {
	var until time.Time // none: no deadline
	if d, ok := l.timers.min(); ok {
		left := d - probe.Nanotime()
		if left <= 0 {
			return false
		}
		until = time.Now().Add(time.Duration(left))
	}
	l.sleeping.Store(true)
	l.idle.Store(len(l.timers.items) == 0)
	ready := false
	// A batch posted before sleeping was set found no sleeper to wake: it
	// stored oldest before looking.
	if l.oldest.Load() == math.MaxInt64 && !l.ls.stopping() {
		if l.ring != nil {
			l.ring.notify(true)
		}
		if l.ring == nil || !l.ring.ready() {
			_ = l.file.SetReadDeadline(until) // the file is open while the loop runs
			ready = l.rc.Read(l.poll) == nil  // else the deadline passed: os.ErrDeadlineExceeded
		}
		if l.ring != nil {
			l.ring.notify(false)
		}
	}
	l.sleeping.Store(false)
	l.idle.Store(false)
	return ready
}

// pollNow returns the number of events ready, without waiting.
func (l *loop) pollNow() int {
	n, err := rawEpollWait(l.epfd, l.events[:])
	if err != nil { // EINTR; nothing else happens with valid arguments
		return 0
	}
	return n
}

// takeInbox starts the probes of the requests in the inbox.
func (l *loop) takeInbox() {
	l.mu.Lock()
	l.work, l.inbox = l.inbox, l.work[:0]
	l.oldest.Store(math.MaxInt64)
	l.mu.Unlock()
	for i := range l.work {
		l.start(l.work[i])
		l.work[i] = job{}
	}
}

// expire ends the probes whose deadline has passed and publishes how far
// the loop has settled.
func (l *loop) expire() {
	now := probe.Nanotime()
	for {
		d, ok := l.timers.min()
		if !ok || d > now {
			break
		}
		l.timeout(l.conns[l.timers.items[0].idx], now)
	}
	l.settled.Store(l.ls.opt.Now())
}

// timerHeap is a binary min-heap of connection deadlines; each conn knows
// its position, so a probe that ends early leaves the heap at once.
type timerHeap struct {
	items []timerItem
	conns *[]*conn
}

type timerItem struct {
	at  int64 // deadline, probe.Nanotime
	idx int32 // conn index
}

func (h *timerHeap) min() (int64, bool) {
	if len(h.items) == 0 {
		return 0, false
	}
	return h.items[0].at, true
}

func (h *timerHeap) push(at int64, c *conn) {
	h.items = append(h.items, timerItem{at: at, idx: c.idx})
	c.timer = len(h.items) - 1
	h.up(c.timer)
}

func (h *timerHeap) remove(c *conn) {
	i := c.timer
	if i < 0 {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items = h.items[:last]
	c.timer = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h *timerHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	cs := *h.conns
	cs[h.items[i].idx].timer = i
	cs[h.items[j].idx].timer = j
}

func (h *timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.items[p].at <= h.items[i].at {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *timerHeap) down(i int) {
	n := len(h.items)
	for {
		m := i
		if l := 2*i + 1; l < n && h.items[l].at < h.items[m].at {
			m = l
		}
		if r := 2*i + 2; r < n && h.items[r].at < h.items[m].at {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}
