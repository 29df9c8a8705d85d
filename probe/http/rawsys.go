package http

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loops' system calls on their non-blocking sockets, made without
// telling the Go scheduler (RawSyscall): none of them blocks, so the loop
// keeps its P, and a probe no longer pays entersyscall/exitsyscall five to
// seven times. The pointers passed are to heap memory the loop owns (buffers,
// sockaddrs in the loop struct), converted in the call expression so they
// stay alive for the call. A loop that waits parks on the runtime's poller
// (see [Loops]), so no call here blocks.

// errnoOf returns e as an error, nil for 0. Errno values are small: boxing
// them does not allocate.
func errnoOf(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// rawSocket is socket(2).
func rawSocket(family, typ int) (int, error) {
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), uintptr(typ), 0)
	return int(fd), errnoOf(e)
}

// rawLingerZero sets SO_LINGER 0 on fd: close() then sends an RST.
func rawLingerZero(fd int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER,
		uintptr(unsafe.Pointer(&lingerZero)), unsafe.Sizeof(lingerZero), 0)
	return errnoOf(e)
}

// rawEpollAdd adds fd to epoll instance epfd with event ev.
func rawEpollAdd(epfd, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), unix.EPOLL_CTL_ADD, uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoOf(e)
}

// rawEpollWait returns the events ready on epfd, without waiting
// (epoll_pwait: arm64 has no epoll_wait).
func rawEpollWait(epfd int, evs []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawConnect is connect(2) to a raw sockaddr of size n.
func rawConnect(fd int, sa unsafe.Pointer, n uintptr) error {
	_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(sa), n)
	return errnoOf(e)
}

// rawWrite is write(2) of b, which is not empty.
func rawWrite(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawRead is read(2) into b, which is not empty.
func rawRead(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawClose is close(2).
func rawClose(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoOf(e)
}

// rawSockaddr is a connect() destination in the kernel's layout, reused by
// a loop for every probe.
type rawSockaddr struct {
	v4 unix.RawSockaddrInet4
	v6 unix.RawSockaddrInet6
}

// set fills the sockaddr of dst (unmapped) and port, and returns it with
// its size.
func (s *rawSockaddr) set(dst netip.Addr, port uint16) (unsafe.Pointer, uintptr) {
	if dst.Is4() {
		s.v4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.As4()}
		p := (*[2]byte)(unsafe.Pointer(&s.v4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		return unsafe.Pointer(&s.v4), unsafe.Sizeof(s.v4)
	}
	s.v6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.As16()}
	p := (*[2]byte)(unsafe.Pointer(&s.v6.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	return unsafe.Pointer(&s.v6), unsafe.Sizeof(s.v6)
}
