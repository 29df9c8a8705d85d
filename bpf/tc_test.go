//go:build linux

package bpf_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
)

// tcHelperEnv makes the test binary a helper that attaches a capture with
// TC in the namespace it names (its own for "-"), says "attached" and its
// pid, and waits to be killed.
const tcHelperEnv = "SONDE_TEST_TC_HELPER_NS"

func TestMain(m *testing.M) {
	if runPassiveHelper() {
		os.Exit(0)
	}
	if ns := os.Getenv(tcHelperEnv); ns != "" {
		attach := func() error {
			_, err := attachTC()
			return err
		}
		var err error
		if ns == "-" { // started inside its namespace
			err = attach()
		} else {
			err = netns.Do(ns, attach)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("attached", os.Getpid())
		select {} // until killed
	}
	testenv.Main(m)
}

// attachTC attaches a capture to lo with TC, in the calling thread's
// namespace.
func attachTC() (*bpf.Capture, error) {
	return bpf.NewCapture(bpf.CaptureConfig{
		Interface: 1, Local4: netip.MustParseAddr("127.0.0.1"),
		PortLo: 62000, PortHi: 62010, Attach: bpf.AttachTC,
	})
}

// tcShow returns the output of tc ARGS in namespace ns.
func tcShow(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("tc", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sondeFilters counts sonde's filters on lo's ingress in ns.
func sondeFilters(t *testing.T, ns string) int {
	return strings.Count(tcShow(t, ns, "filter", "show", "dev", "lo", "ingress"), "sonde_capture")
}

func hasClsact(t *testing.T, ns string) bool {
	return strings.Contains(tcShow(t, ns, "qdisc", "show", "dev", "lo"), "clsact")
}

func attachIn(t *testing.T, ns string) *bpf.Capture {
	t.Helper()
	var c *bpf.Capture
	if err := netns.Do(ns, func() (err error) { c, err = attachTC(); return err }); err != nil {
		t.Fatalf("attach with tc: %v", err)
	}
	if c.Attachment() != bpf.AttachTC {
		t.Fatalf("attachment %v, want tc", c.Attachment())
	}
	return c
}

// TestTCGenerations attaches a second TC capture while the first is still
// attached, as a reload does: both succeed (each filter has its own
// handle), closing the first leaves the second's filter and the qdisc, and
// closing the second removes both.
func TestTCGenerations(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_NET_ADMIN")
	ns := testenv.LoopbackNamespace(t)
	first := attachIn(t, ns)
	second := attachIn(t, ns)
	if n := sondeFilters(t, ns); n != 2 {
		t.Fatalf("%d sonde filters with two generations attached, want 2", n)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if n := sondeFilters(t, ns); n != 1 || !hasClsact(t, ns) {
		t.Fatalf("after closing the first: %d filters, clsact %v; want the second's filter and the qdisc", n, hasClsact(t, ns))
	}
	third := attachIn(t, ns) // and the next reload
	closeLeavesNothing(t, ns, second, third)
}

// closeLeavesNothing closes cs and expects no sonde filter and no clsact
// qdisc left in ns.
func closeLeavesNothing(t *testing.T, ns string, cs ...*bpf.Capture) {
	t.Helper()
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := sondeFilters(t, ns); n != 0 || hasClsact(t, ns) {
		t.Fatalf("after close: %d filters, clsact %v; want nothing left", n, hasClsact(t, ns))
	}
}

// startHelper starts a helper process that attaches a TC capture in ns
// (in a pid namespace of its own, where it is pid 1, when newPID) and
// returns it with its pid as it sees it, once attached. The test kills it
// by its PID when it ends.
func startHelper(t *testing.T, ns string, newPID bool) (*exec.Cmd, string) {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), tcHelperEnv+"="+ns)
	if newPID {
		helper = netns.Command(ns, os.Args[0], "-test.run=^$") // ip netns exec: the helper is in ns already
		helper.Env = append(os.Environ(), tcHelperEnv+"=-")
		helper.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = helper.Process.Kill() // ours; a no-op once it ended
		_ = helper.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
	}()
	select {
	case l := <-line:
		pid, ok := strings.CutPrefix(l, "attached ")
		if !ok {
			t.Fatalf("helper said %q", l)
		}
		return helper, pid
	case <-time.After(30 * time.Second):
		t.Fatal("helper did not attach")
	}
	return nil, ""
}

// kill ends a helper with SIGKILL, as a crash would: no clean-up.
func kill(t *testing.T, helper *exec.Cmd) {
	t.Helper()
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
}

// TestTCLeftovers kills a process holding a TC capture with SIGKILL, as a
// crash would: its filter stays. The next attach removes it, takes the
// qdisc over, and leaves nothing behind when it closes.
func TestTCLeftovers(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_NET_ADMIN")
	ns := testenv.LoopbackNamespace(t)
	helper, _ := startHelper(t, ns, false)
	kill(t, helper)
	if n := sondeFilters(t, ns); n != 1 {
		t.Fatalf("%d sonde filters after the crash, want the one left behind", n)
	}
	c := attachIn(t, ns)
	if n := sondeFilters(t, ns); n != 1 {
		t.Fatalf("%d sonde filters after a new start, want only the new one", n)
	}
	closeLeavesNothing(t, ns, c)
}

// TestTCOwnersAcrossPidNamespaces runs two captures on one interface from
// processes in pid namespaces of their own, both pid 1, as two sonde pods
// on the host network are: the second start must leave the first's filter
// alone. Once one of them is killed, the next start (in this test's pid
// namespace, where neither pid means anything) removes its filter and
// only its.
func TestTCOwnersAcrossPidNamespaces(t *testing.T) {
	testenv.RequirePrivileged(t, "network and pid namespaces, CAP_BPF, CAP_NET_ADMIN")
	ns := testenv.LoopbackNamespace(t)
	a, pidA := startHelper(t, ns, true)
	b, pidB := startHelper(t, ns, true)
	if pidA != "1" || pidB != "1" {
		t.Fatalf("helpers are pids %s and %s in their namespaces, want 1 and 1", pidA, pidB)
	}
	if n := sondeFilters(t, ns); n != 2 {
		t.Fatalf("%d sonde filters with two live captures of the same pid in other pid namespaces, want 2", n)
	}
	kill(t, a)
	c := attachIn(t, ns)
	if n := sondeFilters(t, ns); n != 2 {
		t.Fatalf("%d sonde filters after a start that follows the first's crash, want 2: the second's and the new one", n)
	}
	kill(t, b)
	d := attachIn(t, ns)
	if n := sondeFilters(t, ns); n != 2 {
		t.Fatalf("%d sonde filters after a start that follows the second's crash, want 2", n)
	}
	closeLeavesNothing(t, ns, c, d)
}

// TestTCForeignQdisc checks that a clsact qdisc someone else added, and
// its filters, stay when sonde detaches.
func TestTCForeignQdisc(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_NET_ADMIN")
	ns := testenv.LoopbackNamespace(t)
	tcShow(t, ns, "qdisc", "add", "dev", "lo", "clsact")
	for _, dir := range []string{"ingress", "egress"} { // classic BPF "accept nothing" filters
		tcShow(t, ns, "filter", "add", "dev", "lo", dir, "prio", "7", "bpf", "bytecode", "1,6 0 0 0,")
	}
	c := attachIn(t, ns)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"ingress", "egress"} {
		if !hasClsact(t, ns) || !strings.Contains(tcShow(t, ns, "filter", "show", "dev", "lo", dir), "bytecode") {
			t.Fatalf("sonde removed a qdisc or an %s filter it did not add", dir)
		}
	}
	if n := sondeFilters(t, ns); n != 0 {
		t.Fatalf("%d sonde filters after close, want 0", n)
	}
}
