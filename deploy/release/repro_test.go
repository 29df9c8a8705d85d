package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestReproducible builds every artefact a second time from the same
// binaries, and then the whole release from a fresh clone of the commit
// (binaries included, in another directory): both give the bytes of
// SHA256SUMS, so the image's digest too.
func TestReproducible(t *testing.T) {
	r := built(t)
	sums, err := os.ReadFile(filepath.Join(r.dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(sums), "\n"); n != 5 {
		t.Errorf("SHA256SUMS has %d lines, want 5 (image, 2 packages, 2 tarballs):\n%s", n, sums)
	}
	bin := os.Getenv("SONDE_RELEASE_BIN")
	if bin == "" {
		t.Fatal("SONDE_RELEASE_BIN is not set: run make test-release")
	}

	t.Run("same binaries", func(t *testing.T) {
		out := t.TempDir()
		args := []string{"release", "-version", r.version, "-revision", r.revision, "-epoch", strconv.FormatInt(r.created.Unix(), 10),
			"-bin", bin, "-ca-bundle", r.caBundle, "-out", out, "-root", r.root}
		if err := run(context.Background(), args, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		compareSums(t, sums, filepath.Join(out, "SHA256SUMS"))
	})

	t.Run("fresh clone", func(t *testing.T) {
		git := testenv.Tool(t, "git", "git")
		// go build records whether the checkout had changes (untracked files
		// too), and the version says -dirty: a clone of the commit has none.
		if st := mustRun(t, git, "-C", r.root, "status", "--porcelain"); st != "" || strings.HasSuffix(r.version, "-dirty") {
			t.Skipf("the tree has changes that a clone of %s does not have:\n%s", r.revision, st)
		}
		clone := filepath.Join(t.TempDir(), "sonde")
		mustRun(t, git, "clone", "--quiet", "--no-checkout", r.root, clone)
		mustRun(t, git, "-C", clone, "checkout", "--quiet", "--detach", r.revision)
		cmd := exec.Command("make", "-C", clone, "release", "CA_BUNDLE="+r.caBundle)
		cmd.Env = withoutMakeVars(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make release in a clone: %v\n%s", err, out)
		}
		compareSums(t, sums, filepath.Join(clone, "dist", "SHA256SUMS"))
	})
}

// withoutMakeVars drops the variables of the outer make from env, so that
// the clone's make computes its version, commit and time itself.
func withoutMakeVars(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VERSION", "REVISION", "SOURCE_DATE_EPOCH", "DIST", "RELEASE_BIN":
			continue
		}
		out = append(out, kv)
	}
	return out
}

func compareSums(t *testing.T, want []byte, path string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s:\n%s\nwant the release's:\n%s", path, got, want)
	}
}

// TestKustomizeNamesImage: the deploy kit's kustomization replaces the
// StatefulSet's image sonde with the name make image gives its image, and
// the kit's README says how to push the archive.
func TestKustomizeNamesImage(t *testing.T) {
	base := filepath.Join("..", "kubernetes", "base")
	var k struct {
		Images []struct {
			Name    string `yaml:"name"`
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		}
	}
	readYAML(t, filepath.Join(base, "kustomization.yaml"), &k)
	var sts struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct{ Name, Image string }
				}
			}
		}
	}
	readYAML(t, filepath.Join(base, "statefulset.yaml"), &sts)
	if len(k.Images) != 1 || k.Images[0].Name != imageName || k.Images[0].NewName != imageName {
		t.Errorf("kustomization images: %+v, want one entry %s with newName %s", k.Images, imageName, imageName)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Image != imageName {
			t.Errorf("container %s: image %q, want %q (which the kustomization replaces)", c.Name, c.Image, imageName)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"skopeo copy --all oci-archive:dist/" + archiveName("VERSION") + " docker://REGISTRY/sonde:VERSION", "make image"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("deploy/README.md lacks %q", want)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestMakeVersion runs `make version` in clones of the commit: 0.0.0-N-gHASH
// before the first tag, the tag without its v on a tagged commit, the
// describe form after one, -dirty for an uncommitted change.
func TestMakeVersion(t *testing.T) {
	r := built(t)
	git := testenv.Tool(t, "git", "git")
	clone := filepath.Join(t.TempDir(), "sonde")
	mustRun(t, git, "clone", "--quiet", "--no-checkout", r.root, clone)
	mustRun(t, git, "-C", clone, "checkout", "--quiet", "--detach", r.revision)
	for _, tag := range strings.Fields(mustRun(t, git, "-C", clone, "tag", "--list")) {
		mustRun(t, git, "-C", clone, "tag", "--delete", tag)
	}
	head := strings.TrimSpace(mustRun(t, git, "-C", clone, "rev-parse", "--short=12", "HEAD"))
	count := strings.TrimSpace(mustRun(t, git, "-C", clone, "rev-list", "--count", "HEAD"))
	// since counts the commits after tag, as git describe does: one when
	// HEAD is a plain commit, more when it merges a branch.
	since := func(tag string) string {
		return strings.TrimSpace(mustRun(t, git, "-C", clone, "rev-list", "--count", tag+"..HEAD"))
	}
	version := func() string {
		cmd := exec.Command("make", "-s", "-C", clone, "version")
		cmd.Env = withoutMakeVars(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make version: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	steps := []struct {
		do   func()
		want func() string // after do
	}{
		{func() {}, func() string { return "0.0.0-" + count + "-g" + head }},
		{func() { mustRun(t, git, "-C", clone, "tag", "v1.2.0", "HEAD~1") }, func() string { return "1.2.0-" + since("v1.2.0") + "-g" + head }},
		{func() { mustRun(t, git, "-C", clone, "tag", "not-a-version") }, func() string { return "1.2.0-" + since("v1.2.0") + "-g" + head }},
		{func() { mustRun(t, git, "-C", clone, "tag", "v1.3.0") }, func() string { return "1.3.0" }},
		{func() {
			if err := os.WriteFile(filepath.Join(clone, "README.md"), []byte("changed\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, func() string { return "1.3.0-dirty" }},
	}
	for _, s := range steps {
		s.do()
		if got, want := version(), s.want(); got != want {
			t.Errorf("make version: %q, want %q", got, want)
		}
	}
}
