// Package host reads what a benchmark needs to know about the machine it
// runs on: its description (CPU model, cores, memory, kernel, load), the
// machine's CPU time from /proc/stat, and a process's CPU time and memory
// from /proc/PID.
package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine describes the host a benchmark ran on, so numbers are never
// quoted without it.
type Machine struct {
	CPU      string    `json:"cpu"`       // CPU model name
	Cores    int       `json:"cores"`     // online CPUs
	MemoryGB float64   `json:"memory_gb"` // physical memory
	Kernel   string    `json:"kernel"`    // kernel release
	Go       string    `json:"go"`        // Go version sonde was built with
	Sonde    string    `json:"sonde"`     // sonde's version
	Load1    float64   `json:"load1"`     // 1-minute load average when the run started
	Time     time.Time `json:"time"`      // when the run started
}

// Describe reads the host's CPU model, cores, memory, kernel and load.
func Describe(sondeVersion string) Machine {
	m := Machine{
		CPU:   "unknown",
		Cores: runtime.NumCPU(),
		Go:    runtime.Version(),
		Sonde: sondeVersion,
		Time:  time.Now().UTC().Truncate(time.Second),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryGB = float64(uint64(si.Totalram)*uint64(si.Unit)) / (1 << 30)
		m.Load1 = float64(si.Loads[0]) / 65536
	}
	return m
}

// String formats the machine on one line.
func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, %.1f GiB, Linux %s, %s, sonde %s, load %.2f, %s",
		m.CPU, m.Cores, m.MemoryGB, m.Kernel, m.Go, m.Sonde, m.Load1, m.Time.Format(time.RFC3339))
}

// CPU is the machine's CPU time from the first line of /proc/stat, in
// clock ticks ([ClockTicks] a second).
type CPU struct {
	Busy, Total uint64
	IRQ         uint64 // hard and soft interrupts: part of Busy
	Steal       uint64 // taken by the hypervisor for other guests: not in Busy or Total
}

// ReadCPU reads the machine's CPU time.
func ReadCPU() (CPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPU{}, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return parseCPU(string(line))
}

// parseCPU parses the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal guest guest_nice.
func parseCPU(line string) (CPU, error) {
	var t CPU
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return t, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPU{}, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		if i == 7 {
			t.Steal = v
		}
		if i >= 7 { // steal is not this machine's work; guest and guest_nice are already in user and nice
			break
		}
		t.Total += v
		if i != 3 && i != 4 { // idle and iowait
			t.Busy += v
		}
		if i == 5 || i == 6 {
			t.IRQ += v
		}
	}
	return t, nil
}

// ClockTicks is USER_HZ, the unit of /proc/stat and /proc/PID/stat times;
// it is 100 on every Linux architecture sonde runs on.
const ClockTicks = 100

// CPUMark is the machine's busy CPU time at one moment, from [MarkCPU].
type CPUMark struct{ busy uint64 }

// MarkCPU reads the machine's busy CPU time now.
func MarkCPU() CPUMark {
	c, _ := ReadCPU() // zero on error: the numbers then read as 0
	return CPUMark{c.Busy}
}

// Since returns the busy CPU seconds of all cores since m.
func (m CPUMark) Since() float64 {
	return float64(MarkCPU().busy-m.busy) / ClockTicks
}

// Process is a process's CPU time and memory, read from /proc.
type Process struct {
	CPU     float64 // user + system seconds
	User    float64 // user seconds (utime)
	System  float64 // system seconds (stime)
	RSS     int64   // resident bytes now
	PeakRSS int64   // highest resident bytes so far (VmHWM)
}

// ReadProcess reads pid's CPU time and resident memory.
func ReadProcess(pid int) (Process, error) {
	var ps Process
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, fmt.Errorf("read process stat: %w", err)
	}
	// The command name is in parentheses and may hold spaces: fields
	// start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ps, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return ps, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // utime, field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return ps, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ps.CPU = float64(ut+st) / ClockTicks
	ps.User, ps.System = float64(ut)/ClockTicks, float64(st)/ClockTicks
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, fmt.Errorf("read process status: %w", err)
	}
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(k) {
		case "VmRSS":
			dst = &ps.RSS
		case "VmHWM":
			dst = &ps.PeakRSS
		default:
			continue
		}
		fs := strings.Fields(string(v)) // "123456 kB"
		if len(fs) == 2 && fs[1] == "kB" {
			n, _ := strconv.ParseInt(fs[0], 10, 64)
			*dst = n << 10
		}
	}
	return ps, nil
}

// TCPActiveOpens returns the TCP connections opened (connect() calls that
// sent a SYN) in the network namespace of process pid, from its
// /proc/PID/net/snmp.
func TCPActiveOpens(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/snmp", pid))
	if err != nil {
		return 0, fmt.Errorf("read TCP counters: %w", err)
	}
	return parseActiveOpens(b)
}

// parseActiveOpens reads ActiveOpens from the Tcp lines of a
// /proc/net/snmp: a line of names, then a line of values.
func parseActiveOpens(b []byte) (uint64, error) {
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "ActiveOpens" && i < len(f) {
				v, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("TCP ActiveOpens %q: %w", f[i], err)
				}
				return v, nil
			}
		}
		break
	}
	return 0, errors.New("no TCP ActiveOpens in /proc/net/snmp")
}
