package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNetOutcome(t *testing.T) {
	op := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	tests := []struct {
		name string
		err  error
		want Outcome
	}{
		{"nil", nil, Success},
		{"refused", op(syscall.ECONNREFUSED), Refused},
		{"host unreachable", op(syscall.EHOSTUNREACH), Unreachable},
		{"network unreachable", op(syscall.ENETUNREACH), Unreachable},
		{"host down", op(syscall.EHOSTDOWN), Unreachable},
		{"network down", op(syscall.ENETDOWN), Unreachable},
		{"out of local ports", op(syscall.EADDRNOTAVAIL), LocalError},
		{"out of descriptors", &net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}, LocalError},
		{"socket not allowed", &net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EPERM)}, LocalError},
		{"firewall rejects the connect", op(syscall.EPERM), Error},
		{"kernel connect timeout", op(syscall.ETIMEDOUT), Timeout},
		{"context deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), Timeout},
		{"i/o deadline", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, Timeout},
		{"cancelled", fmt.Errorf("dial: %w", context.Canceled), Error},
		{"EAGAIN is not a timeout", op(syscall.EAGAIN), Error},
		{"reset", op(syscall.ECONNRESET), Error},
		{"other", errors.New("boom"), Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NetOutcome(tt.err); got != tt.want {
				t.Errorf("NetOutcome(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestLocalCauseOf(t *testing.T) {
	sys := func(call string, errno syscall.Errno) error {
		return fmt.Errorf("connect: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError(call, errno)})
	}
	tests := []struct {
		name string
		err  error
		want LocalCause
	}{
		{"nil", nil, CauseNone},
		{"not an errno", errors.New("EMFILE"), CauseNone},
		{"refused", sys("connect", syscall.ECONNREFUSED), CauseNone},
		{"process out of descriptors", sys("socket", syscall.EMFILE), CauseDescriptors},
		{"system out of descriptors", sys("socket", syscall.ENFILE), CauseDescriptors},
		{"no local port at connect", sys("connect", syscall.EADDRNOTAVAIL), CausePorts},
		{"no local port at bind", sys("bind", syscall.EADDRINUSE), CausePorts},
		{"source address not local", sys("bind", syscall.EADDRNOTAVAIL), CausePorts},
		{"no buffers", sys("connect", syscall.ENOBUFS), CauseBuffers},
		{"no memory", sys("socket", syscall.ENOMEM), CauseBuffers},
		{"socket not allowed", sys("socket", syscall.EACCES), CausePermissions},
		{"bind not allowed", sys("bind", syscall.EPERM), CausePermissions},
		{"connect blocked by a firewall", sys("connect", syscall.EPERM), CauseNone},
		{"connect to broadcast", sys("connect", syscall.EACCES), CauseNone},
		{"bare EPERM", syscall.EPERM, CauseNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LocalCauseOf(tt.err); got != tt.want {
				t.Errorf("LocalCauseOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestDialerBindNoPort checks that a dialer with a source address sets
// IP_BIND_ADDRESS_NO_PORT on its sockets, and one without does not bind.
func TestDialerBindNoPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	for _, tt := range []struct {
		name   string
		source netip.Addr
		want   int
	}{
		{"source address", netip.MustParseAddr("127.0.0.1"), 1},
		{"kernel's choice", netip.Addr{}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewDialer(tt.source).DialContext(context.Background(), dst)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rc, err := c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var got int
			var gerr error
			if err := rc.Control(func(fd uintptr) {
				got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT)
			}); err != nil {
				t.Fatal(err)
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			if got != tt.want {
				t.Errorf("IP_BIND_ADDRESS_NO_PORT = %d, want %d", got, tt.want)
			}
		})
	}
}
