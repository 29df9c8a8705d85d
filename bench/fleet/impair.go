package fleet

import (
	"container/heap"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/netns"
)

// The impairment stage is a namespace between the prober's veth and the
// fleet's: each veth pair ends there, in one device per side, and the stage
// forwards every frame from one device to the other. It forwards in the
// kernel, with an nftables netdev rule (fwd), which is also where it loses
// packets (numgen random) and sends them twice (dup): what this machine's
// kernel has instead of netem. To delay frames, which no nftables or qdisc
// of this kernel can do, the rule drops them instead, and a user-space
// bridge, which reads every frame from a packet socket on each device before
// the rule runs (a packet tap sees frames first), sends each one out of the
// other device after its delay. Delays that differ reorder the frames.
//
// The stage touches TCP only when it loses and duplicates: ARP and ICMP
// pass, so neighbours resolve as on a plain link. The delaying bridge holds
// every frame.

// Impairment is what the stage does to the frames crossing it, in both
// directions. The zero Impairment forwards every frame at once.
type Impairment struct {
	// Loss is the share of TCP packets dropped, 0..1.
	Loss float64
	// Duplicate is the share of TCP packets sent twice, 0..1.
	Duplicate float64
	// Delay, when not nil, holds each frame for the time it returns before
	// passing it on (user-space bridge). It is called on the bridge's
	// reading goroutines, one per direction.
	Delay func() time.Duration
}

// impairSteps returns the commands that build the stage's namespace and
// its two veth pairs: ProberLink in the prober namespace to "ip"+id in the
// stage, FleetLink in the fleet namespace to "if"+id in the stage.
func (f *Fleet) impairSteps() [][]string {
	pd, fd := f.stageDevs()
	return [][]string{
		{"ip", "netns", "add", f.ImpairNS},
		// The stage's devices have no addresses and must send nothing of
		// their own (IPv6 router solicitations, multicast reports).
		{"ip", "netns", "exec", f.ImpairNS, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.all.disable_ipv6=1"},
		{"ip", "-n", f.ProberNS, "link", "add", f.ProberLink, "type", "veth", "peer", "name", pd, "netns", f.ImpairNS},
		{"ip", "-n", f.FleetNS, "link", "add", f.FleetLink, "type", "veth", "peer", "name", fd, "netns", f.ImpairNS},
		{"ip", "-n", f.ImpairNS, "link", "set", "lo", "up"},
		{"ip", "-n", f.ImpairNS, "link", "set", pd, "up"},
		{"ip", "-n", f.ImpairNS, "link", "set", fd, "up"},
	}
}

// stageDevs returns the stage's devices on the prober's and the fleet's
// side.
func (f *Fleet) stageDevs() (proberSide, fleetSide string) {
	id := f.ProberLink[2:]
	return "ip" + id, "if" + id
}

// impairStage is the running stage: its nftables table and, while frames
// are delayed, the user-space bridge.
type impairStage struct {
	f             *Fleet
	mu            sync.Mutex
	bridge        *bridge
	delayedBefore uint64 // frames forwarded by bridges that have stopped
}

// delayedTotal returns the frames every bridge forwarded; st.mu is held.
func (st *impairStage) delayedTotal() uint64 {
	n := st.delayedBefore
	if st.bridge != nil {
		n += st.bridge.delayed()
	}
	return n
}

// startStage turns segmentation and checksum offloads off on every device
// of the path (the bridge copies frames as bytes: they must be at most the
// MTU and carry their checksums) and starts forwarding.
func (f *Fleet) startStage() error {
	pd, fd := f.stageDevs()
	for _, dev := range []struct{ ns, name string }{{f.ImpairNS, pd}, {f.ImpairNS, fd}, {f.FleetNS, f.FleetLink}, {f.ProberNS, f.ProberLink}} {
		if err := f.Run(dev.ns, "ethtool", "-K", dev.name, "tx", "off", "tso", "off", "gso", "off", "gro", "off"); err != nil {
			return err
		}
	}
	f.stage = &impairStage{f: f}
	return f.stage.set(Impairment{})
}

// Impair sets what the impairment stage does from now on, replacing the
// previous setting in one nftables transaction; Impair(Impairment{}) ends
// every impairment. The fleet must have been made with Config.Impair.
func (f *Fleet) Impair(im Impairment) error {
	if f.stage == nil {
		return errors.New("fleet: no impairment stage (Config.Impair)")
	}
	switch {
	case im.Loss < 0 || im.Loss > 1:
		return fmt.Errorf("impair: loss %v out of range 0..1", im.Loss)
	case im.Duplicate < 0 || im.Duplicate > 1:
		return fmt.Errorf("impair: duplicate %v out of range 0..1", im.Duplicate)
	}
	return f.stage.set(im)
}

// ImpairCounts returns how many TCP packets the stage has lost and
// duplicated, and how many frames it has delayed, since the fleet was made.
func (f *Fleet) ImpairCounts() (lost, duplicated, delayed uint64, err error) {
	if f.stage == nil {
		return 0, 0, 0, errors.New("fleet: no impairment stage (Config.Impair)")
	}
	out, err := netns.Command(f.ImpairNS, "nft", "list", "counters", "table", "netdev", "sonde_impair").CombinedOutput()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("nft list counters: %w: %s", err, out)
	}
	for _, m := range counterRE.FindAllSubmatch(out, -1) {
		n, _ := strconv.ParseUint(string(m[2]), 10, 64)
		switch string(m[1]) {
		case "lost":
			lost = n
		case "duplicated":
			duplicated = n
		}
	}
	f.stage.mu.Lock()
	delayed = f.stage.delayedTotal()
	f.stage.mu.Unlock()
	return lost, duplicated, delayed, nil
}

var counterRE = regexp.MustCompile(`counter (\w+) \{\s*packets (\d+)`)

// perMillion turns a share into the bound of numgen random mod 1000000.
func perMillion(share float64) int { return int(share*1e6 + 0.5) }

// set applies im: the nftables rules, and the bridge when frames are
// delayed. The counters live as long as the table, which is made once and
// then flushed and refilled.
func (st *impairStage) set(im Impairment) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	pd, fd := st.f.stageDevs()
	if im.Delay != nil && st.bridge == nil {
		b, err := newBridge(st.f.ImpairNS, pd, fd)
		if err != nil {
			return err
		}
		st.bridge = b
	}
	if st.bridge != nil {
		st.bridge.setDelay(im.Delay)
	}
	// The kernel forwards unless the bridge does; the bridge's taps read
	// every frame before these rules run.
	pass := func(to string) string { return "fwd to " + to }
	if im.Delay != nil {
		pass = func(string) string { return "drop" }
	}
	var rules string
	for _, dir := range []struct{ from, to string }{{pd, fd}, {fd, pd}} {
		rules += fmt.Sprintf("  chain from_%s {\n    type filter hook ingress device %s priority 0; policy accept;\n", dir.from, dir.from)
		if n := perMillion(im.Loss); n > 0 {
			rules += fmt.Sprintf("    meta l4proto tcp numgen random mod 1000000 <= %d counter name lost drop\n", n-1)
		}
		if n := perMillion(im.Duplicate); n > 0 {
			rules += fmt.Sprintf("    meta l4proto tcp numgen random mod 1000000 <= %d counter name duplicated dup to %s\n", n-1, dir.to)
		}
		rules += "    " + pass(dir.to) + "\n  }\n"
	}
	text := "table netdev sonde_impair {\n  counter lost { }\n  counter duplicated { }\n}\n" +
		"flush table netdev sonde_impair\n" +
		"table netdev sonde_impair {\n" + rules + "}\n"
	cmd := netns.Command(st.f.ImpairNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	if err := runCmd(cmd); err != nil {
		return fmt.Errorf("impair: %w", err)
	}
	if im.Delay == nil && st.bridge != nil {
		err := st.bridge.close() // after the kernel forwards again
		st.delayedBefore += st.bridge.delayed()
		st.bridge = nil
		return err
	}
	return nil
}

// close stops the bridge, if it runs; the namespace goes with the fleet.
func (st *impairStage) close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.bridge == nil {
		return nil
	}
	err := st.bridge.close()
	st.bridge = nil
	return err
}

// bridge forwards frames between two devices from user space, each after a
// delay: one packet socket per device, one reading goroutine per socket and
// one sending goroutine that releases frames in order of their release time.
type bridge struct {
	socks [2]*os.File // by side: the prober's device, the fleet's
	raws  [2]syscall.RawConn

	mu     sync.Mutex
	delay  func() time.Duration
	queue  frameHeap
	seq    uint64
	wake   chan struct{} // a frame was queued
	count  uint64        // frames forwarded so far
	closed bool
	wg     sync.WaitGroup
}

// newBridge opens packet sockets on devices a and b of namespace ns and
// starts forwarding between them (with no delay until setDelay).
func newBridge(ns, a, b string) (*bridge, error) {
	br := &bridge{wake: make(chan struct{}, 1)}
	err := netns.Do(ns, func() error {
		for side, dev := range []string{a, b} {
			f, raw, err := openTap(dev)
			if err != nil {
				return err
			}
			br.socks[side], br.raws[side] = f, raw
		}
		return nil
	})
	if err != nil {
		for _, s := range br.socks {
			if s != nil {
				s.Close()
			}
		}
		return nil, fmt.Errorf("impair: bridge: %w", err)
	}
	for side := range br.socks {
		br.wg.Go(func() { br.read(side) })
	}
	br.wg.Go(br.send)
	return br, nil
}

// openTap opens a non-blocking packet socket that reads every frame
// arriving at dev (not those sent from it) and sends frames out of dev.
func openTap(dev string) (*os.File, syscall.RawConn, error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, nil, os.NewSyscallError("socket", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		unix.Close(fd)
		return nil, nil, os.NewSyscallError("packet_ignore_outgoing", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
		unix.Close(fd)
		return nil, nil, os.NewSyscallError("bind", err)
	}
	f := os.NewFile(uintptr(fd), "tap-"+dev)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, raw, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// read queues every frame that arrives on side for the other side.
func (br *bridge) read(side int) {
	buf := make([]byte, 1<<16)
	for {
		var n int
		var rerr error
		err := br.raws[side].Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr != nil || n <= 0 || n > len(buf) {
			continue
		}
		br.mu.Lock()
		d := time.Duration(0)
		if br.delay != nil {
			d = br.delay()
		}
		br.seq++
		heap.Push(&br.queue, frame{at: time.Now().Add(d), seq: br.seq, to: 1 - side, b: append([]byte(nil), buf[:n]...)})
		br.mu.Unlock()
		select {
		case br.wake <- struct{}{}:
		default:
		}
	}
}

// send releases queued frames at their time.
func (br *bridge) send() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		br.mu.Lock()
		if br.closed {
			br.mu.Unlock()
			return
		}
		now := time.Now()
		var due []frame
		for len(br.queue) > 0 && !br.queue[0].at.After(now) {
			due = append(due, heap.Pop(&br.queue).(frame))
		}
		wait := time.Hour
		if len(br.queue) > 0 {
			wait = br.queue[0].at.Sub(now)
		}
		br.count += uint64(len(due))
		br.mu.Unlock()
		for _, fr := range due {
			_, _ = br.socks[fr.to].Write(fr.b) // a frame the device refuses is lost, as on a wire
		}
		timer.Reset(wait)
		select {
		case <-br.wake:
		case <-timer.C:
		}
	}
}

// setDelay sets the delay of the frames read from now on.
func (br *bridge) setDelay(d func() time.Duration) {
	br.mu.Lock()
	br.delay = d
	br.mu.Unlock()
}

// delayed returns the frames forwarded so far.
func (br *bridge) delayed() uint64 {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.count
}

// close stops reading and sending; frames still queued are dropped.
func (br *bridge) close() error {
	br.mu.Lock()
	br.closed = true
	br.mu.Unlock()
	select {
	case br.wake <- struct{}{}:
	default:
	}
	var errs []error
	for _, s := range br.socks {
		errs = append(errs, s.Close())
	}
	br.wg.Wait()
	return errors.Join(errs...)
}

// frame is a frame waiting in the bridge: sent out of side to at time at;
// seq keeps frames with the same time in arrival order.
type frame struct {
	at  time.Time
	seq uint64
	to  int
	b   []byte
}

type frameHeap []frame

func (h frameHeap) Len() int { return len(h) }
func (h frameHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h frameHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *frameHeap) Push(x any)   { *h = append(*h, x.(frame)) }
func (h *frameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
