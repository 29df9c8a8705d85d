//go:build !nokubernetes && !noconsul

package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestVersionDiscovery: a default build's sonde version lists every
// discovery kind, Kubernetes and Consul among them.
func TestVersionDiscovery(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "\ndiscovery: consul, dns, file, http, kubernetes, static\n"; !strings.Contains(out.String(), want) {
		t.Errorf("sonde version printed\n%s\nwant the line %q", out.String(), strings.TrimSpace(want))
	}
}
