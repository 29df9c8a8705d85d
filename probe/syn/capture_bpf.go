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
}

func newBPFCapture(p *Prober, cfg bpf.CaptureConfig) (*bpfCapture, error) {
	c, err := bpf.NewCapture(cfg)
	if err != nil {
		return nil, err
	}
	bc := &bpfCapture{c: c, p: p}
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

// stop closes the capture, which interrupts poll; close has nothing left to do.
func (bc *bpfCapture) stop() error  { return bc.c.Close() }
func (bc *bpfCapture) close() error { return nil }
