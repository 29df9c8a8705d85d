package bench

import (
	"bufio"
	"bytes"
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

// DescribeMachine reads the host's CPU model, cores, memory, kernel and load.
func DescribeMachine(sondeVersion string) Machine {
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

// cpuTicks reads the machine's busy and total CPU time from /proc/stat, in
// clock ticks (USER_HZ).
func cpuTicks() (busy, total uint64, err error) {
	t, err := readCPUStat()
	return t.busy, t.total, err
}

// cpuStat is the machine's CPU time from the first line of /proc/stat, in
// clock ticks (USER_HZ).
type cpuStat struct {
	busy, total uint64
	irq         uint64 // hard and soft interrupts: part of busy
	steal       uint64 // taken by the hypervisor for other guests: not in busy or total
}

func readCPUStat() (cpuStat, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return parseCPUStat(string(line))
}

// parseCPUStat parses the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal guest guest_nice.
func parseCPUStat(line string) (cpuStat, error) {
	var t cpuStat
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return t, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuStat{}, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		if i == 7 {
			t.steal = v
		}
		if i >= 7 { // steal is not this machine's work; guest and guest_nice are already in user and nice
			break
		}
		t.total += v
		if i != 3 && i != 4 { // idle and iowait
			t.busy += v
		}
		if i == 5 || i == 6 {
			t.irq += v
		}
	}
	return t, nil
}

// clockTicks is USER_HZ, the unit of /proc/stat and /proc/PID/stat times;
// it is 100 on every Linux architecture sonde runs on.
const clockTicks = 100

// machineCPU measures the whole machine's CPU time between two readings.
type machineCPU struct{ busy, total uint64 }

func readMachineCPU() machineCPU {
	b, t, _ := cpuTicks() // zero on error: the numbers then read as 0
	return machineCPU{b, t}
}

// since returns the busy CPU seconds of all cores since m.
func (m machineCPU) since() float64 {
	n := readMachineCPU()
	return float64(n.busy-m.busy) / clockTicks
}

// procStat is a process's CPU time and memory, read from /proc.
type procStat struct {
	CPU     float64 // user + system seconds
	User    float64 // user seconds (utime)
	System  float64 // system seconds (stime)
	RSS     int64   // resident bytes now
	PeakRSS int64   // highest resident bytes so far (VmHWM)
}

// readProc reads pid's CPU time and resident memory.
func readProc(pid int) (procStat, error) {
	var ps procStat
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
	ps.CPU = float64(ut+st) / clockTicks
	ps.User, ps.System = float64(ut)/clockTicks, float64(st)/clockTicks
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
