//go:build linux

package bpf_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
)

func encodeEvent(ev bpf.Event) []byte {
	b := make([]byte, 0, bpf.EventSize)
	ne := binary.NativeEndian
	b = ne.AppendUint64(b, ev.Ktime)
	b = append(b, ev.Remote[:]...)
	b = append(b, ev.Local[:]...)
	b = ne.AppendUint32(b, ev.Seq)
	b = ne.AppendUint32(b, ev.Ack)
	b = ne.AppendUint16(b, ev.RemotePort)
	b = ne.AppendUint16(b, ev.LocalPort)
	return append(b, ev.Kind, ev.TcpFlags, ev.Family, ev.IcmpCode)
}

func TestDecodeEvent(t *testing.T) {
	want := bpf.Event{
		Ktime: 123456789, Remote: netip.MustParseAddr("::ffff:198.18.0.1").As16(),
		Local: netip.MustParseAddr("::ffff:192.0.2.1").As16(), Seq: 7, Ack: 0xdeadbeef,
		RemotePort: 80, LocalPort: 61001, Kind: uint8(bpf.KindSynAck), TcpFlags: 0x12, Family: 4,
	}
	var got bpf.Event
	if err := bpf.DecodeEvent(encodeEvent(want), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(bpf.Event{})); diff != "" {
		t.Errorf("DecodeEvent (-want +got):\n%s", diff)
	}
	if err := bpf.DecodeEvent(make([]byte, bpf.EventSize-1), &got); !errors.Is(err, bpf.ErrShortEvent) {
		t.Errorf("short record: err = %v, want ErrShortEvent", err)
	}
	if got := int(unsafe.Sizeof(bpf.Event{})); got != bpf.EventSize {
		t.Errorf("sizeof(Event) = %d, want EventSize %d", got, bpf.EventSize)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(encodeEvent(bpf.Event{Ktime: 1, Family: 6, Kind: 2}))
	f.Add([]byte{})
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev bpf.Event
		err := bpf.DecodeEvent(b, &ev)
		if (err == nil) != (len(b) >= bpf.EventSize) {
			t.Fatalf("len %d: err = %v", len(b), err)
		}
		if err == nil && string(encodeEvent(ev)) != string(b[:bpf.EventSize]) {
			t.Fatalf("round trip differs")
		}
	})
}

// TestCaptureLoopback attaches the program to lo in a fresh namespace and
// checks that a refused connect() from a port inside the range is captured as
// an RST and an accepted one as a SYN-ACK, through TCX and through TC.
func TestCaptureLoopback(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_NET_ADMIN")
	for _, mode := range []bpf.Attach{bpf.AttachTCX, bpf.AttachTC} {
		t.Run(mode.String(), func(t *testing.T) {
			if mode == bpf.AttachTCX && !testenv.KernelAtLeast(t, 6, 6) {
				t.Skip("TCX needs kernel 6.6")
			}
			ns := testenv.LoopbackNamespace(t)
			var c *bpf.Capture
			var ln net.Listener
			err := netns.Do(ns, func() error {
				var err error
				c, err = bpf.NewCapture(bpf.CaptureConfig{
					Interface: 1, Local4: netip.MustParseAddr("127.0.0.1"),
					PortLo: 62000, PortHi: 62010, Attach: mode,
				})
				if err != nil {
					return err
				}
				ln, err = net.Listen("tcp4", "127.0.0.1:0")
				if err != nil {
					return err
				}
				for i, target := range []string{"127.0.0.1:1", ln.Addr().String()} {
					d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 62000 + i}, Timeout: time.Second}
					if conn, err := d.Dial("tcp4", target); err == nil {
						conn.Close()
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			if c.Attachment() != mode {
				t.Errorf("Attachment() = %v, want %v", c.Attachment(), mode)
			}
			kinds := map[uint16]bpf.Kind{}
			deadline := time.Now().Add(2 * time.Second)
			for len(kinds) < 2 && time.Now().Before(deadline) {
				if _, err := c.Poll(time.Now().Add(20*time.Millisecond), func(ev *bpf.Event) {
					if _, ok := kinds[ev.LocalPort]; !ok {
						kinds[ev.LocalPort] = bpf.Kind(ev.Kind)
					}
				}); err != nil {
					t.Fatal(err)
				}
			}
			want := map[uint16]bpf.Kind{62000: bpf.KindRST, 62001: bpf.KindSynAck}
			if diff := cmp.Diff(want, kinds); diff != "" {
				t.Errorf("captured kinds by local port (-want +got):\n%s", diff)
			}
			cnt, err := c.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if cnt.Matched < 2 || cnt.Seen < cnt.Matched || cnt.RingFull != 0 {
				t.Errorf("counters = %+v", cnt)
			}
		})
	}
}

// TestCaptureRingFull fills a one-page ring without reading it: the replies
// that do not fit are counted as ring-full, never lost silently.
func TestCaptureRingFull(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, CAP_BPF, CAP_NET_ADMIN")
	ns := testenv.LoopbackNamespace(t)
	const dials = 200
	var c *bpf.Capture
	err := netns.Do(ns, func() error {
		var err error
		c, err = bpf.NewCapture(bpf.CaptureConfig{
			Interface: 1, Local4: netip.MustParseAddr("127.0.0.1"),
			PortLo: 62000, PortHi: 62000 + dials - 1, RingBytes: os.Getpagesize(),
		})
		if err != nil {
			return err
		}
		for i := range dials {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 62000 + i}, Timeout: time.Second}
			if conn, err := d.Dial("tcp4", "127.0.0.1:1"); err == nil {
				conn.Close()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cnt, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	read, err := c.Poll(time.Now().Add(50*time.Millisecond), func(*bpf.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	perPage := os.Getpagesize() / (bpf.EventSize + 8)
	if cnt.Matched != dials || cnt.RingFull == 0 || uint64(read)+cnt.RingFull != dials || read > perPage {
		t.Errorf("matched %d, ring full %d, read %d (a page holds %d); want matched %d = read + ring full",
			cnt.Matched, cnt.RingFull, read, perPage, dials)
	}
}
