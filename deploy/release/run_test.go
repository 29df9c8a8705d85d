package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// unpackImage extracts the layers of img in order into a new directory
// with GNU tar, which restores the security.capability extended attribute
// from the PAX records, as a container runtime does, and returns it.
func unpackImage(t *testing.T, img v1.Image) string {
	t.Helper()
	gnuTar := testenv.Tool(t, "tar", "tar")
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rootfs, &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOSUID != 0 {
		t.Fatalf("%s is on a nosuid mount, where exec ignores file capabilities: set TMPDIR elsewhere", rootfs)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(gnuTar, "--extract", "--gzip", "--xattrs", "--xattrs-include=*", "--same-owner", "--same-permissions", "--directory", rootfs)
		cmd.Stdin = rc
		out, err := cmd.CombinedOutput()
		rc.Close()
		if err != nil {
			t.Fatalf("tar -x layer %d: %v\n%s", i, err, out)
		}
	}
	return rootfs
}

// TestImageRunsAsNonRoot unpacks the amd64 image into a root filesystem
// and runs its sonde as the image's user, 65532, in a network namespace of
// its own with only loopback: the file capabilities alone give it the SYN
// prober with eBPF capture, and a syn:// probe of a listener succeeds while
// one of a closed port is refused. A copy of the binary without the
// extended attribute falls back to connect(): the capabilities come from
// the file.
func TestImageRunsAsNonRoot(t *testing.T) {
	r := built(t)
	testenv.RequirePrivileged(t, "network and mount namespaces, chroot, file capabilities")
	unshare := testenv.Tool(t, "unshare", "util-linux")
	if !inChild(t, unshare, "--net", "--mount", "--propagation", "private") {
		return
	}
	mustRun(t, testenv.Tool(t, "ip", "iproute2"), "link", "set", "lo", "up")
	a := openArchive(t, filepath.Join(r.dist, archiveName(r.version)), imageName+":"+r.version)
	img := imageFor(t, a, "amd64")
	rootfs := unpackImage(t, img)
	getcap := mustRun(t, testenv.Tool(t, "getcap", "libcap2-bin"), filepath.Join(rootfs, imageBinary))
	if !strings.Contains(getcap, "cap_net_admin,cap_net_raw,cap_perfmon,cap_bpf=ep") {
		t.Errorf("getcap after unpacking: %q, want cap_net_admin,cap_net_raw,cap_perfmon,cap_bpf=ep", getcap)
	}
	// What a runtime mounts: /proc (sonde reads the local port range) and a
	// read-only /sys of the container's network namespace.
	for _, m := range []struct{ fs, dir string }{{"proc", "proc"}, {"sysfs", "sys"}} {
		dir := filepath.Join(rootfs, m.dir)
		if err := os.Mkdir(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(m.fs, dir, m.fs, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
			t.Fatalf("mount %s: %v", m.fs, err)
		}
		// Before t.TempDir's clean-up (clean-ups run last first), which must
		// not reach into the mount.
		t.Cleanup(func() {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Fatalf("unmount %s: %v", dir, err)
			}
		})
	}
	// As the image's user and with its environment, the entrypoint found
	// through the config's PATH as a runtime finds it. setuid from root to
	// 65532 clears every capability set, so only exec's file capabilities
	// remain.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	asUser := func(args ...string) (string, error) {
		cmd := exec.Command(unshare, append([]string{"--root", rootfs, "--wd", "/", "--setgid", "65532", "--setuid", "65532", "--"}, args...)...)
		cmd.Env = cf.Config.Env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	sonde := cf.Config.Entrypoint[0]

	out, err := asUser(sonde, "version")
	if err != nil {
		t.Fatalf("sonde version as 65532: %v\n%s", err, out)
	}
	t.Logf("sonde version as 65532:\n%s", out)
	for _, want := range []string{"sonde " + r.version + " (", "revision: " + r.revision + "\n",
		"capabilities: CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON\n", "tcp probe path: syn-bpf "} {
		if !strings.Contains(out, want) {
			t.Errorf("sonde version as 65532 lacks %q:\n%s", want, out)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	testenv.AcceptAndClose(ln)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, tt := range []struct {
		target, outcome string
		exit            int
	}{
		{ln.Addr().String(), "success", 0},
		{closedAddr, "refused", 1},
	} {
		out, err := asUser(sonde, "probe", "-json", "-timeout", "2s", "syn://"+tt.target)
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("sonde probe syn://%s as 65532: exit %d: %s", tt.target, code, out)
		var res struct{ Protocol, Outcome string }
		if code != tt.exit || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != tt.outcome {
			t.Errorf("sonde probe syn://%s as 65532: exit %d, %q; want exit %d and outcome %s", tt.target, code, out, tt.exit, tt.outcome)
		}
	}

	// The control: the same binary without its extended attribute.
	bin, err := os.ReadFile(filepath.Join(rootfs, imageBinary))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr/local/bin/sonde-nocaps"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = asUser("sonde-nocaps", "version")
	if err != nil || !strings.Contains(out, "tcp probe path: connect ") {
		t.Errorf("sonde without file capabilities as 65532: %v, want the connect path:\n%s", err, out)
	}
}

// imageFor returns the image of goarch in the archive's index.
func imageFor(t *testing.T, a *ociArchive, goarch string) v1.Image {
	t.Helper()
	im, err := a.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Architecture == goarch {
			img, err := a.index.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no image for %s in the index", goarch)
	return nil
}

// TestImagePodman runs the image with podman where podman can run a
// container. Where it cannot (not installed, or cgroup and rlimit limits of
// a VM), the test says so and skips: TestImageRunsAsNonRoot runs the same
// image without a runtime.
func TestImagePodman(t *testing.T) {
	r := built(t)
	testenv.RequirePrivileged(t, "podman as root")
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman is not installed; TestImageRunsAsNonRoot runs the image's root filesystem without a runtime")
	}
	archive := filepath.Join(r.dist, archiveName(r.version))
	out, err := exec.Command(podman, "run", "--rm", "--network", "none", "--pull", "never",
		"--cap-drop", "all", "--cap-add", "net_raw,net_admin,bpf,perfmon", "oci-archive:"+archive, "version").CombinedOutput()
	if err != nil {
		t.Skipf("podman cannot run a container on this machine (%v); TestImageRunsAsNonRoot runs the image without a runtime:\n%s", err, out)
	}
	for _, want := range []string{"sonde " + r.version + " (", "tcp probe path: syn-bpf "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("podman run … version lacks %q:\n%s", want, out)
		}
	}
}
