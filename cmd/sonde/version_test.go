package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config/discovery/kinds"
	"github.com/sondeprobe/sonde/probe"
)

func TestCapSetPath(t *testing.T) {
	tests := []struct {
		caps capSet
		path probe.TCPPath
		text string
	}{
		{capSet{true, true, true, false}, probe.PathSynBPF, "CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN"},
		{capSet{true, true, true, true}, probe.PathSynBPF, "CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON"},
		{capSet{netRaw: true}, probe.PathSynPacket, "CAP_NET_RAW"},
		{capSet{netRaw: true, bpf: true}, probe.PathSynPacket, "CAP_NET_RAW, CAP_BPF"},
		{capSet{bpf: true, netAdmin: true}, probe.PathConnect, "CAP_BPF, CAP_NET_ADMIN"},
		{capSet{}, probe.PathConnect, "none of CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON"},
	}
	for _, tt := range tests {
		if got, _ := tt.caps.tcpPath(); got != tt.path {
			t.Errorf("%+v: path %q, want %s", tt.caps, got, tt.path)
		}
		if got := tt.caps.String(); got != tt.text {
			t.Errorf("%+v: %q, want %q", tt.caps, got, tt.text)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sonde ", "capabilities: ", "tcp probe path: ", "passive evidence: ",
		"\ndiscovery: " + strings.Join(kinds.Names(), ", ") + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(out.String(), "passive evidence: available\n") {
		t.Errorf("as root, output %q does not say passive evidence is available", out.String())
	}
}

// TestVersionStamped: the version and commit that make stamps with -ldflags
// are what `sonde version` prints; a plain build says devel.
func TestVersionStamped(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "", ""
	if got := buildVersion(); got != "devel" {
		t.Errorf("unstamped version %q, want devel", got)
	}
	version, revision = "1.2.3-4-gabcdef012345", "abcdef0123456789abcdef0123456789abcdef01"
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "sonde 1.2.3-4-gabcdef012345 (go") || lines[1] != "revision: "+revision {
		t.Errorf("sonde version printed\n%s\nwant sonde 1.2.3-4-gabcdef012345 (go…) and revision: %s", out.String(), revision)
	}
}
