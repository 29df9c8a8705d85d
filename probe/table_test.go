package probe

import (
	"net/netip"
	"sync"
	"testing"
)

func ep(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(i%60000+1))
}

// TestTablePut checks that Put changes and adds endpoints, across blocks,
// and that a pointer a reader holds into the table keeps the old endpoint.
func TestTablePut(t *testing.T) {
	t.Parallel()
	tab := NewTable(10)
	for i := range 10 {
		tab.Add(ep(i))
	}
	held, _ := tab.Endpoint16(3)
	tab.Put([]TableEntry{{ID: 3, Endpoint: ep(1003)}, {ID: 9000, Endpoint: ep(9000)}})
	if tab.Len() != 9001 {
		t.Fatalf("Len = %d, want 9001", tab.Len())
	}
	for _, c := range []struct {
		id   uint32
		want netip.AddrPort
	}{{3, ep(1003)}, {4, ep(4)}, {9000, ep(9000)}, {100, netip.AddrPortFrom(netip.IPv6Unspecified(), 0)}} {
		if got := tab.Endpoint(c.id); got != c.want {
			t.Errorf("Endpoint(%d) = %v, want %v", c.id, got, c.want)
		}
	}
	if got := netip.AddrFrom16(*held).Unmap(); got != ep(3).Addr() {
		t.Errorf("a held address changed to %v", got)
	}
	if _, ok := tab.Lookup(9001); ok {
		t.Error("Lookup beyond Len succeeded")
	}
}

// TestTableConcurrent reads a table while one writer adds and changes
// endpoints, for the race detector; every read sees an endpoint that id had.
func TestTableConcurrent(t *testing.T) {
	t.Parallel()
	tab := NewTable(0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for id := range uint32(tab.Len()) {
				if ap := tab.Endpoint(id); ap.Port() != ep(int(id)).Port() {
					t.Errorf("id %d reads %v", id, ap)
					return
				}
			}
		}
	})
	for i := range 20000 {
		tab.Add(ep(i))
		if i%1000 == 999 {
			tab.Put([]TableEntry{{ID: uint32(i / 2), Endpoint: ep(i / 2)}})
		}
	}
	close(stop)
	wg.Wait()
}
