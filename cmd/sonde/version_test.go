package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCapSetPath(t *testing.T) {
	tests := []struct {
		caps capSet
		path string
		text string
	}{
		{capSet{true, true, true}, "syn-bpf", "CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN"},
		{capSet{netRaw: true}, "syn-packet", "CAP_NET_RAW"},
		{capSet{netRaw: true, bpf: true}, "syn-packet", "CAP_NET_RAW, CAP_BPF"},
		{capSet{bpf: true, netAdmin: true}, "connect", "CAP_BPF, CAP_NET_ADMIN"},
		{capSet{}, "connect", "none of CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN"},
	}
	for _, tt := range tests {
		if got := tt.caps.tcpPath(); !strings.HasPrefix(got, tt.path+" ") {
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
	for _, want := range []string{"sonde ", "capabilities: ", "tcp probe path: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}
