package http

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

// TestRingLayouts checks the kernel structures' sizes (include/uapi/linux/io_uring.h).
func TestRingLayouts(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"io_uring_sqe", unsafe.Sizeof(sqe{}), 64},
		{"io_uring_cqe", unsafe.Sizeof(cqe{}), 16},
		{"io_uring_params", unsafe.Sizeof(uringParams{}), 120},
		{"sqe.userData offset", unsafe.Offsetof(sqe{}.userData), 32},
		{"sqe.fileIndex offset", unsafe.Offsetof(sqe{}.fileIndex), 44},
		{"sqe.addr3 offset", unsafe.Offsetof(sqe{}.addr3), 48},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestRingSlotsFull checks that a probe finding every direct-socket slot
// of its loop in use is a LocalError (descriptors), no verdict on the
// target, and that a slot is reused once its probe ended.
func TestRingSlotsFull(t *testing.T) {
	t.Parallel()
	silent := rawServer(t, func(c *net.TCPConn) { readRequest(c); time.Sleep(time.Second) })
	reports := make(chan probe.Report, 3)
	ls := newLoops(t, engines[0], LoopOptions{
		Target:    func(uint32) probe.Target { return silent },
		Sink:      sinkFunc(func(probe.Result) {}), // the reports carry the results
		Now:       probe.Nanotime,
		OnReport:  func(_ uint32, r *probe.Report) { reports <- *r },
		Loops:     1,
		ringFiles: 1,
	})
	runTestLoops(t, ls)
	lr := mustLauncher(t, ls, mustNew(t, Options{}))
	now := probe.Nanotime()
	lr.Launch(0, []probe.Request{
		{ID: 1, Gen: 1, Sent: now, Deadline: now + int64(200*time.Millisecond)},
		{ID: 2, Gen: 1, Sent: now, Deadline: now + int64(200*time.Millisecond)},
	})
	byID := map[uint32]probe.Report{}
	for range 2 {
		r := <-reports
		byID[r.ID] = r
	}
	if r := byID[2]; r.Outcome != probe.LocalError || r.Cause != probe.CauseDescriptors || !errors.Is(r.Err, syscall.EMFILE) {
		t.Errorf("second probe: outcome %v cause %v (%v), want local_error descriptors from EMFILE", r.Outcome, r.Cause, r.Err)
	}
	if r := byID[1]; r.Outcome != probe.Timeout {
		t.Errorf("first probe: outcome %v (%v), want timeout", r.Outcome, r.Err)
	}
	// The first probe's slot comes back once its socket's completions are
	// in, shortly after its result.
	testenv.Eventually(t, "a probe in the freed slot", func() (probe.Report, bool) {
		now := probe.Nanotime()
		lr.Launch(0, []probe.Request{{ID: 3, Gen: 1, Sent: now, Deadline: now + int64(200*time.Millisecond)}})
		r := <-reports
		return r, r.Outcome == probe.Timeout
	})
}
