package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// release is what `make test-release` built and tells the tests through
// the environment.
type release struct {
	dist, version, revision string
	created                 time.Time // SOURCE_DATE_EPOCH
	caBundle                string    // the CA bundle the image carries
	root                    string    // the source tree
}

// built returns the release in SONDE_DIST. Without it the test skips (run
// `make test-release`), or fails when SONDE_REQUIRE_PRIV is 1.
func built(t *testing.T) release {
	t.Helper()
	r := release{dist: os.Getenv("SONDE_DIST"), version: os.Getenv("SONDE_VERSION"), revision: os.Getenv("SONDE_REVISION"),
		caBundle: os.Getenv("SONDE_CA_BUNDLE")}
	epoch := os.Getenv("SONDE_EPOCH")
	if r.dist == "" || r.version == "" || r.revision == "" || r.caBundle == "" || epoch == "" {
		if os.Getenv("SONDE_REQUIRE_PRIV") == "1" {
			t.Fatal("SONDE_DIST, SONDE_VERSION, SONDE_REVISION, SONDE_EPOCH and SONDE_CA_BUNDLE are not all set: run make test-release")
		}
		t.Skip("tests the built release: run make test-release")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		t.Fatalf("SONDE_EPOCH: %v", err)
	}
	r.created = time.Unix(sec, 0).UTC()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	r.root = root
	return r
}

// childEnv marks a test run again in a child process by inChild.
const childEnv = "SONDE_RELEASE_CHILD"

// inChild reports whether this is the child process inChild starts. In the
// test's own process it runs the test again in a child, under the command
// wrap (unshare with the namespaces the test needs), fails the test if the
// child fails, skips it if the child skips, and reports false: the caller
// returns. Namespaces and mounts made this way end with the child.
func inChild(t *testing.T, wrap ...string) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		defer cancel()
	}
	args := append(wrap[1:len(wrap):len(wrap)], os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd := exec.CommandContext(ctx, wrap[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a child under %s:\n%s", strings.Join(wrap, " "), out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skip("the child skipped")
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatal("the child did not run the test")
	}
	return false
}

// mustRun runs a command and returns its combined output; it fails the
// test when the command fails.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tarFile is a file or directory read from a tar archive.
type tarFile struct {
	hdr  *tar.Header
	data []byte
}

// readTar reads every entry of a tar archive, gzip-compressed or not, in
// order, and fails on two entries of one name.
func readTar(t *testing.T, b []byte) ([]string, map[string]tarFile) {
	t.Helper()
	var r io.Reader = bytes.NewReader(b)
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	var order []string
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := files[h.Name]; dup {
			t.Fatalf("tar: %s twice", h.Name)
		}
		order = append(order, h.Name)
		files[h.Name] = tarFile{h, data}
	}
	return order, files
}
