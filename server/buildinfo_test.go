package server

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBuildInfo: the version and commit sonde was built with reach
// sonde_build_info and the status page's header.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	const version, revision = "1.2.3-4-gabcdef012345", "abcdef0123456789abcdef0123456789abcdef01"
	b := newBackend(t)
	td := startDaemonWith(t, fmt.Sprintf("checks: {web: {protocol: http}}\npools: [{name: p, check: web, targets: [%q]}]\n", b.addr()),
		func(o *Options) { o.Version, o.Revision = version, revision })
	want := fmt.Sprintf(`
# HELP sonde_build_info sonde's version, the commit it was built from and its Go version; the value is 1.
# TYPE sonde_build_info gauge
sonde_build_info{goversion=%q,revision=%q,version=%q} 1
`, runtime.Version(), revision, version)
	if err := testutil.GatherAndCompare(td.d.metrics.reg, strings.NewReader(want), "sonde_build_info"); err != nil {
		t.Error(err)
	}
	resp, err := http.Get(td.http.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d, %v", resp.StatusCode, err)
	}
	header, _, ok := strings.Cut(string(page), "</header>")
	if !ok {
		t.Fatalf("status page has no header:\n%s", page)
	}
	for _, s := range []string{">" + version + "<", "commit " + revision} {
		if !strings.Contains(header, s) {
			t.Errorf("status page header lacks %q:\n%s", s, header)
		}
	}
}

// TestBuildInfoDefaults: a daemon started without a version or commit says
// so instead of leaving the labels empty.
func TestBuildInfoDefaults(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	td := startDaemon(t, fmt.Sprintf("checks: {web: {protocol: http}}\npools: [{name: p, check: web, targets: [%q]}]\n", b.addr()))
	want := fmt.Sprintf(`
# HELP sonde_build_info sonde's version, the commit it was built from and its Go version; the value is 1.
# TYPE sonde_build_info gauge
sonde_build_info{goversion=%q,revision="unknown",version="devel"} 1
`, runtime.Version())
	if err := testutil.GatherAndCompare(td.d.metrics.reg, strings.NewReader(want), "sonde_build_info"); err != nil {
		t.Error(err)
	}
}
