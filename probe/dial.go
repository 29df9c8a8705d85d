package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dialer opens the TCP connections of one-shot probes (connect() and HTTP).
// Every connection it returns is set to close with an RST (SO_LINGER 0), so a
// prober opening thousands of connections a second leaves no TIME_WAIT
// sockets behind. With a source address, sockets are bound with
// IP_BIND_ADDRESS_NO_PORT, so the kernel picks the local port at connect()
// time per destination, not at bind() time from the whole ephemeral range:
// binding would exhaust the range after about 28,000 probes in flight,
// whatever their destinations. A Dialer is immutable and safe for
// concurrent use.
type Dialer struct {
	d net.Dialer
}

// NewDialer returns a Dialer that binds its connections to source, or lets
// the kernel choose the source address when source is the zero Addr.
func NewDialer(source netip.Addr) *Dialer {
	d := &Dialer{d: net.Dialer{
		KeepAlive: -1, // probe connections are short: no TCP keep-alive probes
	}}
	if source.IsValid() {
		d.d.LocalAddr = &net.TCPAddr{IP: source.Unmap().AsSlice()}
		d.d.Control = setLingerZeroNoPort
	}
	return d
}

// DialContext connects to dst. ctx bounds the connection set-up; an expired
// deadline ends it with an error for which [NetOutcome] returns Timeout.
// Network trace hooks in ctx (net/http/httptrace ConnectStart and
// ConnectDone) are called.
func (d *Dialer) DialContext(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
	c, err := d.d.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok { // cannot happen for network "tcp"; guard rather than panic
		_ = c.Close()
		return nil, fmt.Errorf("dial %s: unexpected connection type %T", dst, c)
	}
	if d.d.Control == nil {
		// SO_LINGER matters only at close, so it is set here, after
		// connect(): a Control function would cost the dial four
		// allocations (its address string among them) for nothing.
		if err := tc.SetLinger(0); err != nil {
			_ = tc.Close()
			return nil, fmt.Errorf("set SO_LINGER: %w", err)
		}
	}
	return tc, nil
}

// setLingerZero is a net.Dialer Control function: it sets SO_LINGER with a
// zero timeout, which makes close() abort the connection with an RST.
func setLingerZero(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER,
			&unix.Linger{Onoff: 1, Linger: 0})
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("set SO_LINGER: %w", err)
	}
	return nil
}

// setLingerZeroNoPort is setLingerZero for a socket that is bound to a
// source address before connecting: it also sets IP_BIND_ADDRESS_NO_PORT
// (Linux 4.2; it applies to IPv6 sockets too), so bind() takes no port.
func setLingerZeroNoPort(network, address string, rc syscall.RawConn) error {
	if err := setLingerZero(network, address, rc); err != nil {
		return err
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("set IP_BIND_ADDRESS_NO_PORT: %w", err)
	}
	return nil
}

// NetOutcome classifies a network error from connecting to or talking with a
// target: LocalError when this host could not run the probe ([LocalCauseOf]:
// out of descriptors, local ports or buffers, or not allowed to open the
// socket), Timeout for an expired deadline or a connection attempt the kernel
// gave up on, Refused for an RST answering the SYN, Unreachable when there is
// no route to the target, Error for anything else, and Success for nil. It
// inspects error types and errnos, never messages.
func NetOutcome(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case LocalCauseOf(err) != CauseNone:
		return LocalError
	case IsTimeout(err):
		return Timeout
	case errors.Is(err, unix.ECONNREFUSED):
		return Refused
	case errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH),
		errors.Is(err, unix.EHOSTDOWN), errors.Is(err, unix.ENETDOWN):
		return Unreachable
	default:
		return Error
	}
}

// IsTimeout reports whether err means that time ran out: a context or I/O
// deadline passed, or the kernel's connect gave up (ETIMEDOUT). A cancelled
// context is not a timeout.
func IsTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, unix.ETIMEDOUT)
}
