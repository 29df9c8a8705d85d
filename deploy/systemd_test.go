package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
)

const unitFile = "systemd/sonde.service"

// shippedBinary is where the unit expects sonde; the tests point a copy of
// the unit at the binary they built instead.
const shippedBinary = "/usr/local/bin/sonde"

// unit is a parsed unit file: section -> key -> values, in order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is no key=value in a section", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// one returns the only value of a [Service] key.
func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	v := u["Service"][key]
	if len(v) != 1 {
		t.Fatalf("[Service] %s set %d times, want once", key, len(v))
	}
	return v[0]
}

// TestSystemdUnit checks that the sandbox keeps what sonde needs: exactly
// its four capabilities (the SYN prober's three and CAP_PERFMON for passive
// evidence), the socket families of raw SYNs, AF_PACKET and
// netlink, the bpf() system call, the network of the host.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, unitFile)
	exec := strings.Fields(u.one(t, "ExecStart"))
	if len(exec) < 2 || exec[0] != shippedBinary || exec[1] != "run" {
		t.Fatalf("ExecStart %q, want %s run ...", exec, shippedBinary)
	}
	if flagValue(exec, "listen") == "" || flagValue(exec, "config") == "" {
		t.Errorf("ExecStart %q: want -config and -listen", exec)
	}
	checkRunFlags(t, unitFile, exec[2:])
	// The state file lives in the unit's StateDirectory, the one place
	// under ProtectSystem=strict that the dynamic user may write.
	stateDir := "/var/lib/" + u.one(t, "StateDirectory") + "/"
	if f := flagValue(exec, "state-file"); !strings.HasPrefix(f, stateDir) || len(f) == len(stateDir) {
		t.Errorf("ExecStart %q: want -state-file in %s", exec, stateDir)
	}
	if got := u.one(t, "ExecReload"); !strings.Contains(got, "kill -HUP $MAINPID") {
		t.Errorf("ExecReload %q, want SIGHUP to the main process", got)
	}
	caps := setOf("CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON")
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		if got := setOf(strings.Fields(u.one(t, k))...); !slices.Equal(got, caps) {
			t.Errorf("%s = %v, want exactly %v", k, got, caps)
		}
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "StateDirectory": "sonde", "LimitMEMLOCK": "infinity",
	} {
		if got := u.one(t, k); got != want {
			t.Errorf("%s=%s, want %s", k, got, want)
		}
	}
	// These would cut sonde off from the host's network, its capabilities
	// there, or the kernel settings it reads.
	for _, k := range []string{"PrivateNetwork", "PrivateUsers", "ProcSubset", "IPAddressDeny", "NetworkNamespacePath"} {
		if v, ok := u["Service"][k]; ok {
			t.Errorf("%s=%v breaks raw sockets or eBPF", k, v)
		}
	}
	families := strings.Fields(u.one(t, "RestrictAddressFamilies"))
	for _, f := range []string{"AF_INET", "AF_INET6", "AF_PACKET", "AF_NETLINK", "AF_UNIX"} {
		if !slices.Contains(families, f) {
			t.Errorf("RestrictAddressFamilies %v lacks %s", families, f)
		}
	}
}

// TestSystemdSyscallFilter expands the unit's SystemCallFilter with
// systemd-analyze and checks the system calls of the SYN prober, the eBPF
// loader and the HTTP server are allowed.
func TestSystemdSyscallFilter(t *testing.T) {
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	var allowed []string
	for _, v := range readUnit(t, unitFile)["Service"]["SystemCallFilter"] {
		if strings.HasPrefix(v, "~") {
			t.Fatalf("SystemCallFilter=%s: the test expects an allow list", v)
		}
		for _, name := range strings.Fields(v) {
			allowed = append(allowed, expandSyscalls(t, analyze, name, map[string]bool{})...)
		}
	}
	for _, sc := range []string{
		"bpf", "socket", "setsockopt", "getsockopt", "bind", "connect", "sendmmsg", "recvmmsg", "sendto",
		"recvfrom", "accept4", "mmap", "munmap", "epoll_pwait", "epoll_ctl", "ioctl", "prlimit64", "rt_sigaction",
		"clone", "futex", "getrandom",
	} {
		if !slices.Contains(allowed, sc) {
			t.Errorf("SystemCallFilter denies %s", sc)
		}
	}
}

// expandSyscalls returns the system calls of a name or @group.
func expandSyscalls(t *testing.T, analyze, name string, seen map[string]bool) []string {
	t.Helper()
	if !strings.HasPrefix(name, "@") {
		return []string{name}
	}
	if seen[name] {
		return nil
	}
	seen[name] = true
	out, err := exec.Command(analyze, "syscall-filter", name).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
	}
	var calls []string
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.TrimSpace(line)
		if i == 0 || f == "" || strings.HasPrefix(f, "#") {
			continue
		}
		calls = append(calls, expandSyscalls(t, analyze, f, seen)...)
	}
	if len(calls) == 0 {
		t.Fatalf("systemd-analyze knows no system calls in %s", name)
	}
	return calls
}

// TestSystemdAnalyze runs systemd-analyze verify on a copy of the unit that
// starts the sonde built for this test (verify wants the binary to exist),
// and systemd-analyze security on the sandbox.
func TestSystemdAnalyze(t *testing.T) {
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	var copied strings.Builder
	replaced := 0
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "ExecStart="+shippedBinary+" "); ok {
			line = "ExecStart=" + testenv.Sonde(t) + " " + rest
			replaced++
		}
		copied.WriteString(line)
	}
	if replaced != 1 {
		t.Fatalf("%s: %d ExecStart=%s lines, want 1", unitFile, replaced, shippedBinary)
	}
	unitPath := filepath.Join(t.TempDir(), "sonde.service")
	if err := os.WriteFile(unitPath, []byte(copied.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on unknown keys and bad values, which it only prints.
	out, err := exec.Command(analyze, "verify", unitPath).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, unitPath) || strings.Contains(line, "sonde.service") {
			t.Errorf("systemd-analyze verify: %s", strings.TrimSpace(line))
		} else if strings.TrimSpace(line) != "" {
			t.Logf("systemd-analyze verify (not about sonde): %s", strings.TrimSpace(line))
		}
	}
	// The exposure score runs from 0 (locked down) to 10 (unprotected); with
	// its capabilities and the host's network sonde scores about 2.2.
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=30", unitPath).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: exposure above 3.0 (or failed): %v\n%s", err, out)
	}
}
