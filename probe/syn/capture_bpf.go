package syn

import (
	"time"

	"github.com/sondeprobe/sonde/bpf"
)

// bpfCapture reads replies from the eBPF capture program's ring buffer.
type bpfCapture struct {
	c       *bpf.Capture
	p       *Prober
	onEvent func(*bpf.Event) // bound once, so Poll allocates nothing
	r       reply
	lost    uint64 // the program's loss count at the reader's last look
	look    int64  // CLOCK_MONOTONIC ns of that look
}

func newBPFCapture(p *Prober, cfg bpf.CaptureConfig) (*bpfCapture, error) {
	c, err := bpf.NewCapture(cfg)
	if err != nil {
		return nil, err
	}
	bc := &bpfCapture{c: c, p: p, look: p.now()}
	bc.onEvent = bc.event
	return bc, nil
}

func (bc *bpfCapture) event(ev *bpf.Event) {
	if decodeEvent(ev, &bc.r) != nil {
		bc.p.rc.invalid.Add(1)
		return
	}
	bc.p.handle(&bc.r)
}

func (bc *bpfCapture) poll(deadline time.Time) error {
	_, err := bc.c.Poll(deadline, bc.onEvent)
	return err
}

func (bc *bpfCapture) counters() (captureCounts, error) {
	c, err := bc.c.Counters()
	return captureCounts{seen: c.Seen, matched: c.Matched, drops: c.RingFull, answered: c.Answered}, err
}

// checkLosses reads the program's loss counter: when it has grown since the
// last look, the losses lie between that look and the latest loss's ingress
// time. The program's global data is memory-mapped on every kernel that has
// BPF ring buffers (5.8; mapping came with 5.5), so the read cannot fail
// where the capture runs; if it did, it would note no loss, as before the
// counter existed.
func (bc *bpfCapture) checkLosses() {
	look := bc.p.now()
	total, last, err := bc.c.Losses()
	if err != nil || total == bc.lost {
		bc.look = look
		return
	}
	bc.lost = total
	bc.p.lost(bc.look-int64(bpfSlack), max(int64(last), bc.look))
	bc.look = look
}

// bpfSlack covers a record's time between its kernel timestamp, taken at
// the program's start, and its commit to the ring: microseconds, in a
// softirq.
const bpfSlack = time.Millisecond

func (bc *bpfCapture) slack() time.Duration { return bpfSlack }

// stop closes the capture, which interrupts poll; close has nothing left to do.
func (bc *bpfCapture) stop() error  { return bc.c.Close() }
func (bc *bpfCapture) close() error { return nil }
