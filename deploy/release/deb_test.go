package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestDeb reads each .deb with dpkg-deb: its fields, version and
// architecture, the conffile, the maintainer scripts, and every file with
// its owner and mode.
func TestDeb(t *testing.T) {
	r := built(t)
	dpkgDeb := testenv.Tool(t, "dpkg-deb", "dpkg")
	unit, err := os.ReadFile(filepath.Join(r.root, unitSource))
	if err != nil {
		t.Fatal(err)
	}
	wantUnit, err := packagedUnit(unit)
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(r.root, configSource))
	if err != nil {
		t.Fatal(err)
	}
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			deb := filepath.Join(r.dist, debName(r.version, goarch))
			fields := map[string]string{}
			for _, f := range []string{"Package", "Version", "Architecture", "Section", "Priority", "Maintainer", "Recommends", "Homepage"} {
				fields[f] = strings.TrimSpace(mustRun(t, dpkgDeb, "--field", deb, f))
			}
			want := map[string]string{"Package": "sonde", "Version": r.version, "Architecture": goarch, "Section": "net",
				"Priority": "optional", "Maintainer": defaultMaintainer, "Recommends": "ca-certificates", "Homepage": defaultSource}
			if diff := cmp.Diff(want, fields); diff != "" {
				t.Errorf("control fields (-want +got):\n%s", diff)
			}

			_, control := readTar(t, commandBytes(t, dpkgDeb, "--ctrl-tarfile", deb))
			if got := string(control["./conffiles"].data); got != debConfig+"\n" {
				t.Errorf("conffiles %q, want %s", got, debConfig)
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				b, _ := maintainerScripts.ReadFile("debian/" + s)
				if f := control["./"+s]; !bytes.Equal(f.data, b) || f.hdr.Mode&0o777 != 0o755 {
					t.Errorf("maintainer script %s: mode %o, %d bytes; want 755 and debian/%s", s, f.hdr.Mode, len(f.data), s)
				}
			}
			if !strings.Contains(string(control["./md5sums"].data), " usr/bin/sonde\n") {
				t.Errorf("md5sums lacks usr/bin/sonde:\n%s", control["./md5sums"].data)
			}

			_, data := readTar(t, commandBytes(t, dpkgDeb, "--fsys-tarfile", deb))
			files := map[string]int64{}
			for name, f := range data {
				if f.hdr.Uname != "root" || f.hdr.Gname != "root" || f.hdr.Uid != 0 || f.hdr.Gid != 0 {
					t.Errorf("%s: owned by %s:%s (%d:%d), want root", name, f.hdr.Uname, f.hdr.Gname, f.hdr.Uid, f.hdr.Gid)
				}
				if !strings.HasSuffix(name, "/") {
					files[name] = f.hdr.Mode & 0o7777
				}
			}
			if diff := cmp.Diff(map[string]int64{"." + debBinary: 0o755, "." + debUnit: 0o644, "." + debConfig: 0o644, "." + debDoc: 0o644}, files); diff != "" {
				t.Errorf("files and modes (-want +got):\n%s", diff)
			}
			if got := data["."+debUnit].data; !bytes.Equal(got, wantUnit) {
				t.Errorf("unit:\n%s\nwant deploy/systemd's starting %s:\n%s", got, debBinary, wantUnit)
			}
			if !bytes.Equal(data["."+debConfig].data, config) {
				t.Errorf("%s is not %s", debConfig, configSource)
			}
			checkELF(t, debBinary, data["."+debBinary].data, goarch)
		})
	}
}

func commandBytes(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// scratchRoot is a copy-on-write view of this machine's root: an overlay
// whose changes go to a tmpfs, mounted in the test's private mount
// namespace, so that dpkg installs into it and never into the real root.
// /run is an empty tmpfs, so no maintainer script finds a running systemd.
type scratchRoot struct{ dir string }

func newScratchRoot(t *testing.T) scratchRoot {
	t.Helper()
	// Not t.TempDir: its clean-up removes everything below, and must never
	// reach into a mount. This directory is removed only once nothing is
	// mounted in it.
	top, err := os.MkdirTemp("", "sonde-scratch-")
	if err != nil {
		t.Fatal(err)
	}
	layers, merged := filepath.Join(top, "layers"), filepath.Join(top, "root")
	for _, d := range []string{layers, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var mounted []string
	t.Cleanup(func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			if err := unix.Unmount(mounted[i], unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v; leaving %s in place", mounted[i], err, top)
				return
			}
		}
		if err := os.RemoveAll(top); err != nil {
			t.Error(err)
		}
	})
	mount := func(src, dst, fstype string, flags uintptr, data string) {
		t.Helper()
		if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
			t.Fatalf("mount %s on %s: %v", fstype, dst, err)
		}
		mounted = append(mounted, dst)
	}
	mount("scratch", layers, "tmpfs", 0, "mode=0755")
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(layers, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount("scratch", merged, "overlay", 0, "lowerdir=/,upperdir="+filepath.Join(layers, "upper")+",workdir="+filepath.Join(layers, "work"))
	mount("scratch", filepath.Join(merged, "run"), "tmpfs", 0, "mode=0755")
	mount("proc", filepath.Join(merged, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	// The machine's /dev, read-only (writing to /dev/null still works).
	dev := filepath.Join(merged, "dev")
	mount("/dev", dev, "", unix.MS_BIND, "")
	if err := unix.Mount("", dev, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dev, err)
	}
	return scratchRoot{dir: merged}
}

// run runs a command chrooted into the scratch root and returns its output.
func (s scratchRoot) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{s.dir}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s scratchRoot) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.run(t, args...)
	if err != nil {
		t.Fatalf("in the scratch root: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s scratchRoot) path(p string) string { return filepath.Join(s.dir, p) }

// TestDebInstall installs the amd64 package with dpkg into a scratch root
// (a copy-on-write view of this Debian machine, never its real root, and
// with no service started): the files, the conffile, a unit that
// systemd-analyze verify accepts, and the capabilities, which come from the
// unit's AmbientCapabilities and not from the file. A local edit of the
// configuration survives a reinstall and a removal; a purge leaves nothing.
func TestDebInstall(t *testing.T) {
	r := built(t)
	testenv.RequirePrivileged(t, "a mount namespace and an overlay for a scratch root")
	unshare := testenv.Tool(t, "unshare", "util-linux")
	testenv.Tool(t, "dpkg", "dpkg")
	testenv.Tool(t, "systemd-analyze", "systemd")
	testenv.Tool(t, "setpriv", "util-linux")
	if !inChild(t, unshare, "--mount", "--propagation", "private") {
		return
	}
	root := newScratchRoot(t)
	deb, err := os.ReadFile(filepath.Join(r.dist, debName(r.version, "amd64")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root.path("/tmp/sonde.deb"), deb, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := root.run(t, "dpkg-query", "--show", "sonde"); err == nil {
		t.Fatalf("sonde is installed on this machine already:\n%s", out)
	}
	t.Logf("dpkg --install:\n%s", root.mustRun(t, "dpkg", "--install", "/tmp/sonde.deb"))
	if got := root.mustRun(t, "dpkg-query", "--show", "--showformat", "${Status} ${Version}", "sonde"); got != "install ok installed "+r.version {
		t.Errorf("dpkg-query: %q, want install ok installed %s", got, r.version)
	}
	listed := strings.Fields(root.mustRun(t, "dpkg-query", "--listfiles", "sonde"))
	for p, mode := range map[string]fs.FileMode{debBinary: 0o755, debUnit: 0o644, debConfig: 0o644, debDoc: 0o644} {
		fi, err := os.Stat(root.path(p))
		if err != nil {
			t.Errorf("installed: %v", err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != mode || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: mode %v owner %d:%d, want %v root", p, fi.Mode(), st.Uid, st.Gid, mode)
		}
		if !strings.Contains(" "+strings.Join(listed, " ")+" ", " "+p+" ") {
			t.Errorf("dpkg -L sonde does not list %s", p)
		}
	}
	if got := root.mustRun(t, "dpkg-query", "--show", "--showformat", "${Conffiles}", "sonde"); !strings.HasPrefix(strings.TrimSpace(got), debConfig+" ") {
		t.Errorf("conffiles %q, want %s", got, debConfig)
	}

	// The unit as installed: systemd-analyze verify finds nothing to say
	// about it (it checks that /usr/bin/sonde exists, too).
	out, err := root.run(t, "systemd-analyze", "verify", debUnit)
	if err != nil {
		t.Errorf("systemd-analyze verify %s: %v\n%s", debUnit, err, out)
	}
	for line := range strings.Lines(out) {
		if strings.Contains(line, "sonde") {
			t.Errorf("systemd-analyze verify: %s", strings.TrimSpace(line))
		} else if strings.TrimSpace(line) != "" {
			t.Logf("systemd-analyze verify (not about sonde): %s", strings.TrimSpace(line))
		}
	}

	// Capabilities: none on the file (every local user could use them), the
	// unit's ambient set for the service. Run sonde as the unit would: a
	// non-root user with only those ambient capabilities.
	if _, err := unix.Getxattr(root.path(debBinary), "security.capability", make([]byte, 64)); err != unix.ENODATA {
		t.Errorf("%s has file capabilities (%v), want none: the unit grants them", debBinary, err)
	}
	ambient := unitValue(t, root.path(debUnit), "AmbientCapabilities")
	var caps []string
	for _, c := range strings.Fields(ambient) {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	set := strings.Join(caps, ",")
	out = root.mustRun(t, "setpriv", "--reuid", "65532", "--regid", "65532", "--clear-groups", "--inh-caps", set, "--ambient-caps", set, "--", debBinary, "version")
	t.Logf("sonde version with the unit's ambient capabilities %s:\n%s", set, out)
	if !strings.Contains(out, "tcp probe path: syn-bpf ") || !strings.Contains(out, "sonde "+r.version+" (") {
		t.Errorf("the installed sonde with the unit's ambient capabilities %s:\n%s", ambient, out)
	}

	// A local edit of the conffile survives a reinstall and a removal.
	edit := []byte("# edited here\n")
	conf, err := os.ReadFile(root.path(debConfig))
	if err != nil {
		t.Fatal(err)
	}
	edited := append(conf, edit...)
	if err := os.WriteFile(root.path(debConfig), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	root.mustRun(t, "dpkg", "--install", "/tmp/sonde.deb")
	checkFile(t, root.path(debConfig), edited, "after a reinstall")
	root.mustRun(t, "dpkg", "--remove", "sonde")
	if got := root.mustRun(t, "dpkg-query", "--show", "--showformat", "${Status}", "sonde"); got != "deinstall ok config-files" {
		t.Errorf("after dpkg -r: %q, want deinstall ok config-files", got)
	}
	for _, p := range []string{debBinary, debUnit, debDoc} {
		if _, err := os.Lstat(root.path(p)); err == nil {
			t.Errorf("%s is still there after dpkg -r", p)
		}
	}
	checkFile(t, root.path(debConfig), edited, "after dpkg -r")

	// A purge removes the configuration and leaves nothing of sonde.
	t.Logf("dpkg --purge:\n%s", root.mustRun(t, "dpkg", "--purge", "sonde"))
	if out, err := root.run(t, "dpkg-query", "--show", "sonde"); err == nil {
		t.Errorf("dpkg-query --show sonde after a purge:\n%s", out)
	}
	for _, p := range append(listed, debConfig+".dpkg-old", debConfig+".dpkg-dist") {
		if _, err := os.Lstat(root.path(p)); err == nil && p != "/." && !isSharedDir(p) {
			t.Errorf("%s is still there after dpkg -P", p)
		}
	}
}

// isSharedDir reports whether p is a directory that other packages own too.
func isSharedDir(p string) bool {
	switch p {
	case "/etc", "/usr", "/usr/bin", "/usr/lib", "/usr/lib/systemd", "/usr/lib/systemd/system", "/usr/share", "/usr/share/doc":
		return true
	}
	return false
}

func checkFile(t *testing.T, path string, want []byte, when string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s %s: %v, %d bytes; want the %d bytes edited", path, when, err, len(got), len(want))
	}
}

// unitValue returns the value of the one line key= of a unit file.
func unitValue(t *testing.T, path, key string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) != 1 {
		t.Fatalf("%s: %d lines %s=, want 1", path, len(vals), key)
	}
	return vals[0]
}
