package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/config/discovery/kinds"
	"github.com/sondeprobe/sonde/probe"
)

// version and revision are stamped by make (`git describe` and the commit)
// with -ldflags "-X main.version=… -X main.revision=…". A plain go build
// leaves them empty: the version is then the module's, or devel, and the
// revision the commit go build recorded, if any.
var version, revision string

// buildVersion returns sonde's version: the stamped one, the module version
// of a `go install …@version`, or "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// buildRevision returns the commit sonde was built from: the stamped one, the
// one go build recorded from the checkout (vcs.revision), or "unknown".
func buildRevision() string {
	if revision != "" {
		return revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// runVersion prints sonde's version, the commit and the Go runtime it was
// built with, the discovery kinds built in (build tags leave some out), the
// TCP probe path its capabilities allow, and whether it can observe this
// host's connections for passive evidence.
func runVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stdout)
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	fmt.Fprintf(stdout, "sonde %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(stdout, "revision: %s\n", buildRevision())
	fmt.Fprintf(stdout, "discovery: %s\n", strings.Join(kinds.Names(), ", "))
	caps, err := effectiveCaps()
	if err != nil {
		fmt.Fprintf(stdout, "capabilities: unknown (%v)\n", err)
		return nil
	}
	fmt.Fprintf(stdout, "capabilities: %s\n", caps)
	path, why := caps.tcpPath()
	fmt.Fprintf(stdout, "tcp probe path: %s (%s%s)\n", path, path.Describe(), why)
	if err := bpf.PassiveAvailable(); err != nil {
		fmt.Fprintf(stdout, "passive evidence: unavailable (%v)\n", err)
	} else {
		fmt.Fprintln(stdout, "passive evidence: available")
	}
	return nil
}

// capSet is the subset of the effective capabilities sonde cares about.
type capSet struct{ netRaw, bpf, netAdmin, perfmon bool }

// effectiveCaps reads the process's effective capabilities.
func effectiveCaps() (capSet, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return capSet{}, fmt.Errorf("capget: %w", err)
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return capSet{netRaw: has(unix.CAP_NET_RAW), bpf: has(unix.CAP_BPF), netAdmin: has(unix.CAP_NET_ADMIN), perfmon: has(unix.CAP_PERFMON)}, nil
}

// String lists the capabilities present.
func (c capSet) String() string {
	var have []string
	for _, x := range []struct {
		ok   bool
		name string
	}{{c.netRaw, "CAP_NET_RAW"}, {c.bpf, "CAP_BPF"}, {c.netAdmin, "CAP_NET_ADMIN"}, {c.perfmon, "CAP_PERFMON"}} {
		if x.ok {
			have = append(have, x.name)
		}
	}
	if len(have) == 0 {
		return "none of CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON"
	}
	return strings.Join(have, ", ")
}

// tcpPath says which path TCP checks in tcp_mode auto would use, and what
// the faster paths lack ("; …", or "").
func (c capSet) tcpPath() (probe.TCPPath, string) {
	switch {
	case c.netRaw && c.bpf && c.netAdmin:
		return probe.PathSynBPF, ""
	case c.netRaw:
		return probe.PathSynPacket, "; eBPF needs CAP_BPF and CAP_NET_ADMIN"
	}
	return probe.PathConnect, "; SYN probes need CAP_NET_RAW"
}
