package main

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestFileCapabilities: the xattr value for
// cap_net_raw,cap_net_admin,cap_bpf,cap_perfmon+ep, byte by byte: revision
// 2 with the effective flag, NET_ADMIN (12) and NET_RAW (13) in the low
// word, PERFMON (38) and BPF (39) in the high word, none inheritable.
func TestFileCapabilities(t *testing.T) {
	want := "01000002" + "00300000" + "00000000" + "c0000000" + "00000000"
	if got := hex.EncodeToString(fileCapabilities(sondeCapabilities...)); got != want {
		t.Errorf("security.capability %s, want %s", got, want)
	}
}

// TestFileCapabilitiesMatchSetcap: the value is what setcap itself writes
// for the same capabilities.
func TestFileCapabilitiesMatchSetcap(t *testing.T) {
	testenv.RequirePrivileged(t, "setcap needs CAP_SETFCAP")
	setcap := testenv.Tool(t, "setcap", "libcap2-bin")
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, setcap, "cap_net_raw,cap_net_admin,cap_bpf,cap_perfmon+ep", path)
	buf := make([]byte, 64)
	n, err := unix.Getxattr(path, "security.capability", buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(buf[:n]), hex.EncodeToString(fileCapabilities(sondeCapabilities...)); got != want {
		t.Errorf("setcap wrote %s, sonde-release writes %s", got, want)
	}
}

// TestTarBytes: entries come out sorted, owned by root, dated mtime, with
// the extended attributes in PAX records; the same entries give the same
// bytes in any order.
func TestTarBytes(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	bin := file("usr/bin/x", 0o755, []byte("binary"))
	bin.xattrs = map[string][]byte{"security.capability": {1, 0, 0, 2, 0}}
	entries := []entry{bin, dir("usr/bin", 0o755), dir("usr", 0o755), file("usr/a", 0o644, nil), dir("tmp", 0o1777)}
	a, err := tarBytes(entries, mtime)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tarBytes([]entry{entries[4], entries[2], entries[3], entries[1], entries[0]}, mtime)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the same entries in another order gave other bytes")
	}
	order, files := readTar(t, a)
	if got, want := strings.Join(order, " "), "tmp/ usr/ usr/a usr/bin/ usr/bin/x"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	for name, f := range files {
		h := f.hdr
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(mtime) {
			t.Errorf("%s: owner %d:%d (%q:%q), date %v; want 0:0 without names, %v", name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, mtime)
		}
	}
	if h := files["tmp/"].hdr; h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("tmp/: type %c mode %o, want a directory 1777", h.Typeflag, h.Mode)
	}
	x := files["usr/bin/x"]
	if string(x.data) != "binary" || x.hdr.Mode != 0o755 || x.hdr.PAXRecords["SCHILY.xattr.security.capability"] != "\x01\x00\x00\x02\x00" {
		t.Errorf("usr/bin/x: %q mode %o PAX %q", x.data, x.hdr.Mode, x.hdr.PAXRecords)
	}
	if len(files["usr/a"].hdr.PAXRecords) != 0 {
		t.Errorf("usr/a: PAX records %q, want none", files["usr/a"].hdr.PAXRecords)
	}
}

func TestTarBytesRefuses(t *testing.T) {
	for _, tt := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"absolute", []entry{file("/etc/passwd", 0o644, nil)}, "want a clean relative path"},
		{"dot-dot", []entry{file("../x", 0o644, nil)}, "want a clean relative path"},
		{"unclean", []entry{dir("a", 0o755), file("a//b", 0o644, nil)}, "want a clean relative path"},
		{"no parent", []entry{file("a/b", 0o644, nil)}, "its directory a/ comes first"},
		{"twice", []entry{file("a", 0o644, nil), dir("a", 0o755)}, "twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tarBytes(tt.entries, time.Unix(0, 0))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestPackagedUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join("..", "..", unitSource))
	if err != nil {
		t.Fatal(err)
	}
	got, err := packagedUnit(unit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "\nExecStart=/usr/bin/sonde run -config /etc/sonde/sonde.yaml ") {
		t.Errorf("packaged unit does not start /usr/bin/sonde:\n%s", got)
	}
	if n := strings.Count(string(got), "\nExecStart="); n != 1 {
		t.Errorf("%d ExecStart lines, want 1", n)
	}
	for _, bad := range []string{"", "ExecStart=/usr/bin/sonde run\n", "ExecStart=/usr/local/bin/sonde run\nExecStart=/usr/local/bin/sonde version\n"} {
		if _, err := packagedUnit([]byte(bad)); err == nil {
			t.Errorf("packagedUnit(%q) succeeded, want an error", bad)
		}
	}
}
