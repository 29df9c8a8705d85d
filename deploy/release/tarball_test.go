package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTarballs reads each architecture's tarball: one directory named like
// it, the static binary for the architecture, the unit as in the tree, the
// example configuration and the README, owned by root and dated at the
// commit; and sha256sum -c accepts SHA256SUMS.
func TestTarballs(t *testing.T) {
	r := built(t)
	docs := map[string]string{"README.md": readmeSource, "sonde.service": unitSource, "sonde.yaml": configSource}
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			name := tarballName(r.version, goarch)
			b, err := os.ReadFile(filepath.Join(r.dist, name))
			if err != nil {
				t.Fatal(err)
			}
			top := "sonde_" + r.version + "_linux_" + goarch + "/"
			_, files := readTar(t, b)
			modes := map[string]int64{}
			for n, f := range files {
				modes[n] = f.hdr.Mode
				if f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(r.created) {
					t.Errorf("%s: owner %d:%d date %v, want root and %v", n, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, r.created)
				}
			}
			want := map[string]int64{top: 0o755, top + "sonde": 0o755, top + "README.md": 0o644, top + "sonde.service": 0o644, top + "sonde.yaml": 0o644}
			if diff := cmp.Diff(want, modes); diff != "" {
				t.Errorf("%s: files and modes (-want +got):\n%s", name, diff)
			}
			for n, src := range docs {
				b, err := os.ReadFile(filepath.Join(r.root, src))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(files[top+n].data, b) {
					t.Errorf("%s: %s is not %s", name, n, src)
				}
			}
			checkELF(t, name+": sonde", files[top+"sonde"].data, goarch)
		})
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	cmd.Dir = r.dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check SHA256SUMS: %v\n%s", err, out)
	} else {
		t.Logf("sha256sum --check SHA256SUMS:\n%s", out)
	}
}
