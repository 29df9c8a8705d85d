// Package linkstat samples a network interface's packet counters, from
// inside its namespace, and finds the window during which it sent: how the
// sweeps of `sonde bench` measure every prober the same way, on the wire.
package linkstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/bench/host"
	"github.com/sondeprobe/sonde/internal/netns"
	"golang.org/x/sys/unix"
)

// Sample is one reading of an interface's packet counters.
type Sample struct {
	At     time.Time // when the counters were read
	TxPkts uint64    // packets sent by the interface
	RxPkts uint64    // packets received by the interface
	Busy   uint64    // busy CPU time of the whole machine, in clock ticks (1/100 s)
}

// Sampler reads one interface's packet counters at a fixed period on its
// own goroutine, from inside the interface's network namespace, until
// [Sampler.Stop]. It measures every prober the same way: on the wire,
// whatever the prober reports about itself.
type Sampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []Sample
	err     error
}

// maxSamples bounds a sampler's memory: at a 2 ms period it is more than
// ten minutes.
const maxSamples = 1 << 19

// Start starts sampling interface ifname in namespace ns every period
// (at least 1 ms). The first sample is taken before it returns.
func Start(ns, ifname string, period time.Duration) (*Sampler, error) {
	period = max(period, time.Millisecond)
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(s.done)
		err := netns.Do(ns, func() error {
			// /proc/thread-self/net is the namespace of this thread,
			// which InNamespace keeps locked in ns.
			f, err := os.Open("/proc/thread-self/net/dev")
			if err != nil {
				return fmt.Errorf("open net/dev: %w", err)
			}
			defer f.Close()
			buf := make([]byte, 64<<10)
			read := func() error {
				n, err := unix.Pread(int(f.Fd()), buf, 0)
				if err != nil {
					return fmt.Errorf("read net/dev: %w", err)
				}
				rx, tx, err := parseNetDev(buf[:n], ifname)
				if err != nil {
					return err
				}
				cpu, _ := host.ReadCPU() // zero on error: CPU then reads as 0
				s.mu.Lock()
				if len(s.samples) < maxSamples {
					s.samples = append(s.samples, Sample{At: time.Now(), TxPkts: tx, RxPkts: rx, Busy: cpu.Busy})
				}
				s.mu.Unlock()
				return nil
			}
			err = read()
			started <- err
			if err != nil {
				return nil
			}
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				select {
				case <-s.stop:
					return read()
				case <-t.C:
					if err := read(); err != nil {
						return err
					}
				}
			}
		})
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			select {
			case started <- err:
			default:
			}
		}
	}()
	if err := <-started; err != nil {
		<-s.done
		return nil, err
	}
	return s, nil
}

// Stop ends sampling (taking one last sample) and returns the samples.
func (s *Sampler) Stop() ([]Sample, error) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.err
}

// parseNetDev returns the received and sent packet counts of ifname from the
// text of /proc/net/dev.
func parseNetDev(b []byte, ifname string) (rx, tx uint64, err error) {
	for line := range bytes.Lines(b) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(name)) != ifname {
			continue
		}
		f := bytes.Fields(rest)
		// bytes packets errs drop fifo frame compressed multicast | bytes packets ...
		if len(f) < 10 {
			return 0, 0, fmt.Errorf("net/dev line for %s has %d fields", ifname, len(f))
		}
		rx, err1 := strconv.ParseUint(string(f[1]), 10, 64)
		tx, err2 := strconv.ParseUint(string(f[9]), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("net/dev line for %s: %w", ifname, err)
		}
		return rx, tx, nil
	}
	return 0, 0, fmt.Errorf("interface %s not in net/dev", ifname)
}

// Window is the span during which an interface sent packets, found from
// samples: from the last sample before its transmit counter first moved by
// more than noise to the first sample after it last did. It is an upper bound on the time the
// sending took (by up to two sampling periods), so rates computed from it are
// lower bounds.
type Window struct {
	Start, End time.Time
	Tx, Rx     uint64  // packets sent and received within the window
	CPU        float64 // busy CPU seconds of the whole machine within the window
}

// Duration returns the window's length.
func (w Window) Duration() time.Duration { return w.End.Sub(w.Start) }

// SendWindow returns the transmit window of samples, or false when the
// counter never moved.
func SendWindow(samples []Sample) (Window, bool) {
	if len(samples) < 2 {
		return Window{}, false
	}
	first, last := -1, -1
	for i := 1; i < len(samples); i++ {
		// A period with fewer than three packets is background noise
		// (neighbour discovery and the like), not a sweep.
		if samples[i].TxPkts-samples[i-1].TxPkts >= 3 {
			if first < 0 {
				first = i - 1
			}
			last = i
		}
	}
	if first < 0 {
		return Window{}, false
	}
	a, b := samples[first], samples[last]
	return Window{Start: a.At, End: b.At, Tx: b.TxPkts - a.TxPkts, Rx: b.RxPkts - a.RxPkts,
		CPU: float64(b.Busy-a.Busy) / host.ClockTicks}, true
}
