// Package connload makes a bounded stream of TCP connections to a set of
// targets and reports what it did and what it cost its process: the client
// traffic of the passive scenario of `sonde bench`, run as a process of its
// own (`sonde bench connect-load`) so that sonde's passive observer, which
// ignores sonde's own connections, sees it as any client's.
package connload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Config is a bounded stream of TCP connections to a set of targets, made
// by [Run].
type Config struct {
	// Targets are connected to in turn. Required, IPv4.
	Targets []netip.AddrPort
	// Rate is the connections per second of all workers together; 0 means
	// as fast as they go.
	Rate int
	// Duration bounds the load in time; at most MaxDuration.
	Duration time.Duration
	// Count bounds it in connections; 0 means Rate × Duration (or
	// MaxCount without a rate), at most MaxCount.
	Count int
	// Workers connect in parallel, each with blocking sockets on a thread
	// of its own; default 2.
	Workers int
	// Timeout is each connect's timeout; default 1 s.
	Timeout time.Duration
}

// Bounds of a [Config].
const (
	MaxDuration = 10 * time.Minute
	MaxCount    = 50_000_000
	MaxRate     = 1_000_000
	maxWorkers  = 64
)

// Result is what a [Run] did, and what it cost its process.
type Result struct {
	Connections uint64  `json:"connections"` // attempts
	Connected   uint64  `json:"connected"`   // handshakes completed
	Refused     uint64  `json:"refused"`     // ECONNREFUSED
	TimedOut    uint64  `json:"timed_out"`   // no answer within the timeout
	Other       uint64  `json:"other"`       // any other error (socket limits, unreachable)
	Seconds     float64 `json:"seconds"`     // wall time from the first connect to the last
	UserCPU     float64 `json:"user_cpu"`    // the process's user CPU seconds over the load
	SystemCPU   float64 `json:"system_cpu"`  // its system CPU seconds over the load
}

// Rate returns the connections per second achieved.
func (r Result) Rate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Connections) / r.Seconds
}

// ParseResult reads the line `sonde bench connect-load` prints.
func ParseResult(b []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("connect-load result %q: %w", tail(b, 200), err)
	}
	if r.Connected+r.Refused+r.TimedOut+r.Other != r.Connections || r.Seconds < 0 || r.UserCPU < 0 || r.SystemCPU < 0 {
		return r, fmt.Errorf("connect-load result %q: outcomes do not add up to the connections, or a negative time", tail(b, 200))
	}
	return r, nil
}

// Validate fills in the defaults and checks the bounds; [Run]
// calls it.
func (c *Config) Validate() error {
	if len(c.Targets) == 0 {
		return errors.New("connect-load: no targets")
	}
	for _, t := range c.Targets {
		if !t.Addr().Unmap().Is4() || t.Port() == 0 {
			return fmt.Errorf("connect-load: target %s: want an IPv4 address and a port", t)
		}
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		return fmt.Errorf("connect-load: duration %v out of range (0, %v]", c.Duration, MaxDuration)
	}
	if c.Rate < 0 || c.Rate > MaxRate {
		return fmt.Errorf("connect-load: rate %d out of range 0-%d", c.Rate, MaxRate)
	}
	if c.Count == 0 {
		c.Count = MaxCount
		if c.Rate > 0 {
			c.Count = min(MaxCount, int(float64(c.Rate)*c.Duration.Seconds()+0.5))
		}
	}
	if c.Count < 1 || c.Count > MaxCount {
		return fmt.Errorf("connect-load: count %d out of range 1-%d", c.Count, MaxCount)
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Workers < 1 || c.Workers > maxWorkers {
		return fmt.Errorf("connect-load: workers %d out of range 1-%d", c.Workers, maxWorkers)
	}
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	if c.Timeout < time.Millisecond || c.Timeout > time.Minute {
		return fmt.Errorf("connect-load: timeout %v out of range 1ms-1m", c.Timeout)
	}
	return nil
}

// dueAt returns when connection i of a worker running at perWorker
// connections per second is due, from the start.
func dueAt(i int, perWorker float64) time.Duration {
	return time.Duration(float64(i) / perWorker * float64(time.Second))
}

// Run makes connections to cfg.Targets, in turn, at cfg.Rate, until
// cfg.Count were made, cfg.Duration passed or ctx is done. Each socket is
// closed as soon as its connect ends, with an RST (SO_LINGER 0) when it
// connected, as proxies close backend connections they give up: neither
// side keeps a TIME_WAIT socket, so a high rate does not run out of ports.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	addrs := make([]unix.SockaddrInet4, len(cfg.Targets))
	for i, t := range cfg.Targets {
		addrs[i] = unix.SockaddrInet4{Port: int(t.Port()), Addr: t.Addr().Unmap().As4()}
	}
	var ru0 unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru0); err != nil {
		return res, fmt.Errorf("connect-load: getrusage: %w", err)
	}
	var (
		next     atomic.Int64 // connections handed out
		counts   [4]atomic.Uint64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	perWorker := float64(cfg.Rate) / float64(cfg.Workers)
	start := time.Now()
	end := start.Add(cfg.Duration)
	tv := unix.NsecToTimeval(cfg.Timeout.Nanoseconds())
	for w := range cfg.Workers {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for i := 0; ; i++ {
				if perWorker > 0 {
					if d := time.Until(start.Add(dueAt(i, perWorker))); d > time.Millisecond {
						time.Sleep(d) // ahead of the schedule; behind it, catch up at full speed
					}
				}
				n := next.Add(1)
				if n > int64(cfg.Count) || ctx.Err() != nil || (i%64 == 0 && time.Now().After(end)) {
					return
				}
				k, err := connectOnce(&addrs[(int(n)+w)%len(addrs)], &tv)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				counts[k].Add(1)
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	var ru1 unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru1); err != nil {
		return res, fmt.Errorf("connect-load: getrusage: %w", err)
	}
	res.UserCPU = tvSeconds(ru1.Utime) - tvSeconds(ru0.Utime)
	res.SystemCPU = tvSeconds(ru1.Stime) - tvSeconds(ru0.Stime)
	res.Connected, res.Refused, res.TimedOut, res.Other = counts[0].Load(), counts[1].Load(), counts[2].Load(), counts[3].Load()
	res.Connections = res.Connected + res.Refused + res.TimedOut + res.Other
	return res, firstErr
}

// connectOnce makes one connection to sa and closes it. It returns the
// outcome's index in Result order (connected, refused, timed out,
// other), or an error when no socket could be made.
func connectOnce(sa *unix.SockaddrInet4, tv *unix.Timeval) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("connect-load: socket: %w", err)
	}
	defer unix.Close(fd)
	// A blocking connect waits at most SO_SNDTIMEO.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, tv); err != nil {
		return 0, fmt.Errorf("connect-load: SO_SNDTIMEO: %w", err)
	}
	err = unix.Connect(fd, sa)
	if errors.Is(err, unix.EINTR) {
		// A signal ended the wait, not the handshake: wait for it here.
		err = awaitConnect(fd, tv)
	}
	switch {
	case err == nil:
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		return 0, nil
	case errors.Is(err, unix.ECONNREFUSED):
		return 1, nil
	case errors.Is(err, unix.EINPROGRESS), errors.Is(err, unix.ETIMEDOUT), errors.Is(err, unix.EAGAIN):
		return 2, nil
	}
	return 3, nil
}

// awaitConnect waits up to tv for the connect in progress on fd to end and
// returns its error.
func awaitConnect(fd int, tv *unix.Timeval) error {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	deadline := time.Now().Add(time.Duration(unix.TimevalToNsec(*tv)))
	for {
		n, err := unix.Poll(pfd, int(max(1, time.Until(deadline).Milliseconds())))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return unix.ETIMEDOUT
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return err
		}
		if soErr != 0 {
			return unix.Errno(soErr)
		}
		return nil
	}
}

// tail returns the last n bytes of b as a string, for error messages.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

func tvSeconds(tv unix.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }
