package main

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestProbeTCP(t *testing.T) {
	listening := tcpListener(t)
	refused := refusedAddr(t)
	r := runProbeTest(t, nil, "-json", "tcp://"+listening, "connect://"+listening, "tcp://"+refused.String())
	if r.code != exitFailure {
		t.Fatalf("exit %d, want 1; stderr %s", r.code, r.stderr)
	}
	lines := r.lines(t)
	var got []string
	for _, l := range lines {
		got = append(got, l["target"].(string)+" "+l["protocol"].(string)+" "+l["outcome"].(string))
		if _, ok := l["status"]; ok {
			t.Errorf("TCP result has a status: %v", l)
		}
	}
	want := []string{"tcp://" + listening + " tcp success", "connect://" + listening + " tcp success", "tcp://" + refused.String() + " tcp refused"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if e, _ := lines[2]["error"].(string); !strings.Contains(e, "refused") {
		t.Errorf("error %q does not say the connection was refused", e)
	}
}

// TestProbeSyn runs syn:// next to tcp:// in a namespace of its own: the
// SYN prober answers success for a listener and refused for a closed port,
// and the check of each URL chose its prober as the daemon does.
func TestProbeSyn(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	ns := testenv.LoopbackNamespace(t)
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:9005")
		if err == nil {
			acceptAndClose(t, ln)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := netns.Command(ns, testenv.Sonde(t), "probe", "-json", "-timeout", "1s",
		"syn://127.0.0.1:9005", "syn://127.0.0.1:9006", "tcp://127.0.0.1:9005")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
		t.Fatalf("sonde probe: %v, want exit 1; stderr %s", err, errOut.String())
	}
	r := probeRun{stdout: out.String()}
	var got []string
	lines := r.lines(t)
	for _, l := range lines {
		got = append(got, l["target"].(string)+" "+l["outcome"].(string))
	}
	want := []string{"syn://127.0.0.1:9005 success", "syn://127.0.0.1:9006 refused", "tcp://127.0.0.1:9005 success"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if e, _ := lines[1]["error"].(string); !strings.Contains(e, "answered the SYN with RST") {
		t.Errorf("syn:// refused with %q, want the SYN prober's reason", e)
	}
}
