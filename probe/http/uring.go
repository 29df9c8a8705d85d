package http

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's io_uring interface, as much of it as the loops use: one ring
// per loop, its submission and completion queues mapped into the process,
// a sparse table of registered ("direct") sockets that the loop's
// connections use by slot, and an eventfd the kernel signals when a
// completion is posted. Values are those of include/uapi/linux/io_uring.h;
// the layouts are checked in uring_test.go.

// Opcodes (enum io_uring_op).
const (
	opAsyncCancel = 14
	opConnect     = 16
	opClose       = 19
	opSend        = 26
	opRecv        = 27
	opSocket      = 45
	opUringCmd    = 46
	opBind        = 56
)

// ringOps are the opcodes a loop needs; a kernel without one of them gets
// the epoll loops.
var ringOps = []struct {
	op   uint8
	name string
}{
	{opAsyncCancel, "ASYNC_CANCEL"}, {opConnect, "CONNECT"}, {opClose, "CLOSE"},
	{opSend, "SEND"}, {opRecv, "RECV"}, {opSocket, "SOCKET"},
	{opUringCmd, "URING_CMD"}, {opBind, "BIND"},
}

// SQE flags.
const (
	sqeFixedFile = 1 << 0
	sqeIOLink    = 1 << 2 // the next SQE starts when this one succeeds; a failure cancels it
	sqeHardLink  = 1 << 3 // the next SQE starts when this one ends, failed or not
)

// Setup, enter and register values.
const (
	setupCQSize    = 1 << 3
	setupClamp     = 1 << 4
	setupSubmitAll = 1 << 7
	// Completions run when the submitting thread next enters the kernel
	// (the loop enters it every pass), not through an interrupt of a
	// running thread; a sleeping one is woken as before. The ring flags
	// work waiting for the loop (sqTaskRun).
	setupCoopTaskrun = 1 << 8
	setupTaskrunFlag = 1 << 9

	featSingleMmap = 1 << 0
	featNoDrop     = 1 << 1

	enterGetEvents = 1 << 0

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	sqCQOverflow = 1 << 1 // sq flags: completions wait in the kernel's overflow list
	sqTaskRun    = 1 << 2 // sq flags: the task should enter the kernel to run completions

	cqEventfdDisabled = 1 << 0

	registerEventfd = 4
	registerProbe   = 8
	registerFiles2  = 13
	rsrcSparse      = 1 << 0
	opSupported     = 1 << 0

	cancelAll        = 1 << 0
	cancelFD         = 1 << 1
	cancelFDFixed    = 1 << 3
	socketSetsockopt = 3 // SOCKET_URING_OP_SETSOCKOPT, the cmd_op of a URING_CMD on a socket
)

// sqe is struct io_uring_sqe (64 bytes). Fields shared by several
// operations (unions in C) are named for their first use here.
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64 // connect/bind: address length; socket: type; uring_cmd: cmd_op
	addr        uint64 // buffer or sockaddr; uring_cmd: level | optname<<32
	len         uint32
	opFlags     uint32 // msg_flags, cancel_flags
	userData    uint64
	bufIndex    uint16
	personality uint16
	fileIndex   uint32 // socket, close: direct slot + 1; uring_cmd: optlen
	addr3       uint64 // uring_cmd: optval
	_           uint64
}

// cqe is struct io_uring_cqe (16 bytes).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// ring is one io_uring instance with its queues mapped. It is owned by one
// loop's goroutine.
type ring struct {
	fd    int
	files int // size of the registered socket table: the loop's connection slots

	sqHead, sqTail, sqFlags *uint32
	sqMask, sqEntries       uint32
	sqes                    []sqe
	tail                    uint32 // next SQE to fill; published to *sqTail by submit

	cqHead, cqTail, cqFlags *uint32
	cqMask                  uint32
	cqes                    []cqe

	sqMem, cqMem, sqeMem []byte
}

// errRingUnsupported wraps the reasons a ring cannot serve the loops.
var errRingUnsupported = errors.New("io_uring cannot run the loops here")

// newRing sets up a ring of entries submission slots, whose completions
// signal evfd, with a table of up to files direct sockets (fewer when the
// descriptor limit is lower: the kernel counts the table against it).
func newRing(entries uint32, files int, evfd int) (*ring, error) {
	p := uringParams{flags: setupCQSize | setupClamp | setupSubmitAll | setupCoopTaskrun | setupTaskrunFlag, cqEntries: entries * 8}
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("%w: io_uring_setup: %w", errRingUnsupported, e)
	}
	r := &ring{fd: int(fd)}
	if err := r.setup(&p, files, evfd); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *ring) setup(p *uringParams, files int, evfd int) error {
	if p.features&featSingleMmap == 0 || p.features&featNoDrop == 0 {
		return fmt.Errorf("%w: kernel lacks single mmap or no-drop completions (features %#x)", errRingUnsupported, p.features)
	}
	if err := r.probeOps(); err != nil {
		return err
	}
	size := max(int(p.sqOff.array)+int(p.sqEntries)*4, int(p.cqOff.cqes)+int(p.cqEntries)*int(unsafe.Sizeof(cqe{})))
	mem, err := unix.Mmap(r.fd, offSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap io_uring queues: %w", err)
	}
	r.sqMem = mem
	r.cqMem = mem // one mapping holds both (IORING_FEAT_SINGLE_MMAP)
	sqeBytes := int(p.sqEntries) * int(unsafe.Sizeof(sqe{}))
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, sqeBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap io_uring submission entries: %w", err)
	}
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead, r.sqTail, r.sqFlags = u32(p.sqOff.head), u32(p.sqOff.tail), u32(p.sqOff.flags)
	r.sqMask, r.sqEntries = *u32(p.sqOff.ringMask), *u32(p.sqOff.ringEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	array := unsafe.Slice(u32(p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i) // SQE i sits in slot i for good
	}
	r.tail = atomic.LoadUint32(r.sqTail)
	r.cqHead, r.cqTail, r.cqFlags = u32(p.cqOff.head), u32(p.cqOff.tail), u32(p.cqOff.flags)
	r.cqMask = *u32(p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&mem[p.cqOff.cqes])), p.cqEntries)

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(files) {
		files = int(lim.Cur)
	}
	reg := struct {
		nr, flags  uint32
		resv2      uint64
		data, tags uint64
	}{nr: uint32(files), flags: rsrcSparse}
	if err := r.register(registerFiles2, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("%w: register %d direct sockets: %w", errRingUnsupported, files, err)
	}
	r.files = files
	fd32 := int32(evfd)
	if err := r.register(registerEventfd, unsafe.Pointer(&fd32), 1); err != nil {
		return fmt.Errorf("register io_uring eventfd: %w", err)
	}
	r.notify(false)
	return nil
}

// probeOps checks that the kernel supports every opcode of ringOps.
func (r *ring) probeOps() error {
	const n = 256
	var buf struct {
		lastOp, opsLen uint8
		resv           uint16
		resv2          [3]uint32
		ops            [n]struct {
			op, resv uint8
			flags    uint16
			resv2    uint32
		}
	}
	if err := r.register(registerProbe, unsafe.Pointer(&buf), n); err != nil {
		return fmt.Errorf("%w: probe opcodes: %w", errRingUnsupported, err)
	}
	for _, o := range ringOps {
		if o.op > buf.lastOp || buf.ops[o.op].flags&opSupported == 0 {
			return fmt.Errorf("%w: kernel lacks IORING_OP_%s", errRingUnsupported, o.name)
		}
	}
	return nil
}

func (r *ring) register(op uintptr, arg unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), op, uintptr(arg), n, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// close unmaps the queues and closes the ring: the kernel cancels what is
// still in flight and closes the direct sockets.
func (r *ring) close() {
	for _, m := range [][]byte{r.sqeMem, r.sqMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.sqMem, r.cqMem, r.sqes, r.cqes = nil, nil, nil, nil, nil
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

// room returns how many SQEs can be filled before the queue is full.
func (r *ring) room() uint32 { return r.sqEntries - (r.tail - atomic.LoadUint32(r.sqHead)) }

// next returns the next SQE, zeroed; the caller made sure there is room.
func (r *ring) next() *sqe {
	s := &r.sqes[r.tail&r.sqMask]
	*s = sqe{}
	r.tail++
	return s
}

// pending is the number of SQEs filled and not yet submitted.
func (r *ring) pending() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// submit hands the filled SQEs to the kernel and runs this thread's
// completion work, without waiting. It also enters the kernel when nothing
// is to be submitted but completions wait for it (overflow, task work).
func (r *ring) submit() error {
	for {
		n := r.pending()
		if n == 0 && atomic.LoadUint32(r.sqFlags)&(sqCQOverflow|sqTaskRun) == 0 {
			return nil
		}
		atomic.StoreUint32(r.sqTail, r.tail)
		_, _, e := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 0, enterGetEvents, 0, 0)
		switch e {
		case 0:
			switch left := r.pending(); {
			case left == 0:
				return nil
			case left == n:
				return fmt.Errorf("io_uring_enter: the kernel took none of %d entries", n)
			}
		case unix.EINTR:
		default:
			return os.NewSyscallError("io_uring_enter", e)
		}
	}
}

// ready reports whether completions wait in the queue.
func (r *ring) ready() bool { return atomic.LoadUint32(r.cqHead) != atomic.LoadUint32(r.cqTail) }

// notify turns the eventfd signal of new completions on or off: off while
// the loop runs, on before it parks.
func (r *ring) notify(on bool) {
	f := atomic.LoadUint32(r.cqFlags)
	if on {
		f &^= cqEventfdDisabled
	} else {
		f |= cqEventfdDisabled
	}
	atomic.StoreUint32(r.cqFlags, f)
}

// errnoOfRes returns the error of a negative completion result.
func errnoOfRes(res int32) unix.Errno { return unix.Errno(-res) }
