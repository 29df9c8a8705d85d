package syn

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
)

// packetCapture reads replies from an AF_PACKET socket (SOCK_DGRAM, so packets
// start at the IP header) bound to the probing interface, with a classic BPF
// filter (see replyFilter) and a TPACKET_V3 ring of blocks that the kernel
// hands over when full or after blockTimeout. Packet timestamps are
// CLOCK_REALTIME and are converted to CLOCK_MONOTONIC per block.
//
// The socket is non-blocking and sits in the Go netpoller: poll parks until the
// kernel retires a block or the deadline passes, without a thread blocked in
// a system call, and stop wakes it by closing the socket's file.
type packetCapture struct {
	p       *Prober
	file    *os.File // owns the socket
	raw     syscall.RawConn
	ring    []byte
	blkSize int
	blkNr   int
	cur     int
	stopped atomic.Bool
	drops   atomic.Uint64
	packets atomic.Uint64
	statsAt atomic.Int64 // CLOCK_MONOTONIC ns of the last read of the kernel's counts
	r       reply
}

const (
	packetBlockSize = 256 << 10 // bytes per TPACKET_V3 block (about 1,000 replies)
	packetFrameSize = 256       // nominal frame size the kernel checks the geometry with
	packetSnapLen   = 192       // bytes of each packet kept: IP + ICMP + quoted IP + 8 bytes
	blockTimeoutMs  = 2         // a partly filled block is handed over after this long
)

func newPacketCapture(p *Prober, ifindex, ringBytes int) (_ *packetCapture, err error) {
	if ringBytes == 0 {
		ringBytes = 8 << 20
	}
	blocks := max(ringBytes/packetBlockSize, 2)
	filter, err := replyFilter(p.ports, packetSnapLen)
	if err != nil {
		return nil, err
	}
	// Protocol 0 receives nothing until bind, so nothing unfiltered gets in.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	c := &packetCapture{p: p, blkSize: packetBlockSize, blkNr: blocks}
	c.statsAt.Store(p.now())
	defer func() {
		if err != nil {
			if c.file == nil {
				unix.Close(fd)
			}
			c.stop()
			c.close()
		}
	}()
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return nil, os.NewSyscallError("attach filter", err)
	}
	// Replies only: not our own outgoing packets (kernel 4.20; harmless without).
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, os.NewSyscallError("tpacket v3", err)
	}
	req := unix.TpacketReq3{
		Block_size: packetBlockSize, Block_nr: uint32(blocks),
		Frame_size: packetFrameSize, Frame_nr: uint32(blocks * packetBlockSize / packetFrameSize),
		Retire_blk_tov: blockTimeoutMs,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, os.NewSyscallError("rx ring", err)
	}
	c.ring, err = unix.Mmap(fd, 0, blocks*packetBlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_LOCKED)
	if err != nil {
		if c.ring, err = unix.Mmap(fd, 0, blocks*packetBlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			return nil, os.NewSyscallError("mmap", err)
		}
	}
	sll := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sll); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, os.NewSyscallError("set nonblock", err)
	}
	c.file = os.NewFile(uintptr(fd), "af_packet")
	if c.raw, err = c.file.SyscallConn(); err != nil {
		return nil, err
	}
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// blockHdr returns the header of block i.
func (c *packetCapture) blockHdr(i int) *unix.TpacketHdrV1 {
	// struct tpacket_block_desc: version, offset_to_priv, then the header.
	return (*unix.TpacketHdrV1)(unsafe.Pointer(&c.ring[i*c.blkSize+8]))
}

func (c *packetCapture) poll(deadline time.Time) error {
	for {
		if c.stopped.Load() {
			return os.ErrClosed
		}
		h := c.blockHdr(c.cur)
		if status := atomic.LoadUint32(&h.Block_status); status&unix.TP_STATUS_USER != 0 {
			if status&unix.TP_STATUS_LOSING != 0 {
				c.noteLoss()
			}
			c.readBlock(c.cur, h)
			atomic.StoreUint32(&h.Block_status, unix.TP_STATUS_KERNEL)
			c.cur = (c.cur + 1) % c.blkNr
			continue
		}
		if !time.Now().Before(deadline) {
			return nil
		}
		if err := c.file.SetReadDeadline(deadline); err != nil {
			return err
		}
		woken := false
		err := c.raw.Read(func(uintptr) bool {
			if woken {
				return true
			}
			woken = true
			return false // wait for a retired block or the deadline
		})
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !c.stopped.Load() {
			return err
		}
	}
}

// readBlock handles every packet of a block the kernel handed over.
func (c *packetCapture) readBlock(i int, h *unix.TpacketHdrV1) {
	blk := c.ring[i*c.blkSize : (i+1)*c.blkSize]
	offset := int64(time.Now().UnixNano()) - probe.Nanotime() // realtime minus monotonic
	off := int(h.Offset_to_first_pkt)
	for range h.Num_pkts {
		if off <= 0 || off+int(unsafe.Sizeof(unix.Tpacket3Hdr{})) > len(blk) {
			return // a corrupt block: drop the rest rather than read outside it
		}
		ph := (*unix.Tpacket3Hdr)(unsafe.Pointer(&blk[off]))
		start, end := off+int(ph.Net), off+int(ph.Net)+int(ph.Snaplen)
		if end <= len(blk) && start < end {
			c.packet(blk[start:end], int64(ph.Sec)*1e9+int64(ph.Nsec)-offset)
		}
		if ph.Next_offset == 0 {
			return
		}
		off += int(ph.Next_offset)
	}
}

func (c *packetCapture) packet(b []byte, ktime int64) {
	if decodePacket(b, &c.r) != nil {
		c.p.rc.invalid.Add(1)
		return
	}
	c.r.ktime = ktime
	c.p.handle(&c.r)
}

func (c *packetCapture) counters() (captureCounts, error) {
	err := c.readStats()
	return captureCounts{matched: c.packets.Load(), drops: c.drops.Load()}, err
}

// readStats adds the kernel's packet and drop counts since the last read to
// the capture's (reading resets the kernel's), and reports drops to the
// prober as lost between the previous read and now. The reader and metrics
// may call it at once: the kernel's counts go to one of them.
func (c *packetCapture) readStats() error {
	var err error
	cerr := c.raw.Control(func(fd uintptr) {
		since := c.statsAt.Swap(c.p.now())
		var st *unix.TpacketStatsV3
		st, err = unix.GetsockoptTpacketStatsV3(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
		if err != nil {
			return
		}
		c.packets.Add(uint64(st.Packets))
		if st.Drops > 0 {
			c.drops.Add(uint64(st.Drops))
			c.p.lost(since-int64(packetSlack), c.p.now())
		}
	})
	if cerr != nil && !c.stopped.Load() {
		err = cerr
	}
	return err
}

// noteLoss handles a block the kernel marked TP_STATUS_LOSING: packets were
// dropped for want of room in the ring since the drop count was last read.
// Reading the count reports them and clears the mark on later blocks. When
// it cannot be read, the loss is reported from the last read on.
func (c *packetCapture) noteLoss() {
	if c.readStats() != nil {
		c.p.lost(c.statsAt.Load()-int64(packetSlack), c.p.now())
	}
}

// checkLosses has nothing to do: drops are reported as blocks show them and
// whenever the counts are read.
func (c *packetCapture) checkLosses() {}

// packetSlack covers a reply's time in a block that the kernel has not
// retired yet: up to blockTimeoutMs, and as long again for the retire
// timer to run.
const packetSlack = 3 * blockTimeoutMs * time.Millisecond

func (c *packetCapture) slack() time.Duration { return packetSlack }

// stop makes a running or later poll return os.ErrClosed: it closes the
// socket, which wakes a waiting poll. The ring stays mapped until close.
func (c *packetCapture) stop() error {
	if c.stopped.Swap(true) || c.file == nil {
		return nil
	}
	return c.file.Close()
}

// close unmaps the ring; poll must have returned for good.
func (c *packetCapture) close() error {
	if c.ring == nil {
		return nil
	}
	err := unix.Munmap(c.ring)
	c.ring = nil
	return err
}
