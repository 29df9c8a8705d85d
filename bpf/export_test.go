//go:build linux

package bpf

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// PassiveMapMemory returns the memory the kernel charges to each of p's
// maps (memlock in the map descriptor's fdinfo), by map name.
func PassiveMapMemory(p *Passive) (map[string]uint64, error) {
	out := map[string]uint64{}
	for name, m := range map[string]*ebpf.Map{
		"watch4": p.objs.Watch4, "watch6": p.objs.Watch6, "stats": p.objs.Stats,
		"socks": p.objs.Socks, "events": p.objs.Events,
	} {
		f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					f.Close()
					return nil, fmt.Errorf("%s: memlock %q: %w", name, v, err)
				}
				out[name] = n
			}
		}
		f.Close()
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("%s: no memlock in fdinfo", name)
		}
	}
	return out, nil
}
