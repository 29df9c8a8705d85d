package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
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
		{"address not available is the prober's problem", op(syscall.EADDRNOTAVAIL), Error},
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
