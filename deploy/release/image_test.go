package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// ociArchive is an oci-archive unpacked into a directory.
type ociArchive struct {
	dir    string
	index  v1.ImageIndex // the image index that index.json names
	digest v1.Hash       // its digest: the image's identity
}

// openArchive unpacks the oci-archive at path, checks that it is a valid
// OCI image layout whose every blob has the digest it is named by, and that
// index.json names one image index as ref.
func openArchive(t *testing.T, path, ref string) *ociArchive {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	order, files := readTar(t, b)
	if !slices.IsSorted(order) {
		t.Errorf("%s: entries not sorted: %q", path, order)
	}
	dir := t.TempDir()
	for _, name := range order {
		f := files[name]
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if hexName, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			if sum := sha256.Sum256(f.data); hex.EncodeToString(sum[:]) != hexName {
				t.Errorf("%s: blob %s has sha256 %x", path, name, sum)
			}
		} else if name != "oci-layout" && name != "index.json" {
			t.Errorf("%s: unexpected entry %s", path, name)
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(files["oci-layout"].data); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", got)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Fatalf("index.json: %+v, want one image index named %s", im.Manifests, ref)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("image index: %v", err)
	}
	return &ociArchive{dir: dir, index: idx, digest: im.Manifests[0].Digest}
}

// wantImage is what an image must be.
type wantImage struct {
	version, revision string
	created           time.Time
	arches            []string
	caBundle          []byte
}

// check checks the index's platforms, every image's config and layers, and
// returns each architecture's image.
func (a *ociArchive) check(t *testing.T, w wantImage) map[string]v1.Image {
	t.Helper()
	wantLabels := map[string]string{
		"org.opencontainers.image.title":       "sonde",
		"org.opencontainers.image.description": labels(&inputs{})["org.opencontainers.image.description"],
		"org.opencontainers.image.version":     w.version,
		"org.opencontainers.image.revision":    w.revision,
		"org.opencontainers.image.source":      defaultSource,
		"org.opencontainers.image.created":     w.created.UTC().Format(time.RFC3339),
	}
	im, err := a.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	if diff := cmp.Diff(wantLabels, im.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	if len(im.Manifests) != len(w.arches) {
		t.Fatalf("index has %d manifests, want %d (%v)", len(im.Manifests), len(w.arches), w.arches)
	}
	images := map[string]v1.Image{}
	var baseLayers []v1.Hash
	for i, d := range im.Manifests {
		goarch := w.arches[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != goarch || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d: %s platform %+v, want an OCI manifest for linux/%s", i, d.MediaType, d.Platform, goarch)
			continue
		}
		img, err := a.index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		images[goarch] = img
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantLabels, m.Annotations); diff != "" {
			t.Errorf("%s: manifest annotations (-want +got):\n%s", goarch, diff)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		want := v1.Config{
			User: "65532:65532", Entrypoint: []string{"sonde"}, Cmd: []string{"run", "-config", "/etc/sonde/sonde.yaml", "-listen", ":9123"},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, WorkingDir: "/",
			ExposedPorts: map[string]struct{}{"9123/tcp": {}}, Labels: wantLabels,
		}
		if diff := cmp.Diff(want, cf.Config); diff != "" {
			t.Errorf("%s: config (-want +got):\n%s", goarch, diff)
		}
		if cf.OS != "linux" || cf.Architecture != goarch || !cf.Created.Time.Equal(w.created) || len(cf.History) != 2 {
			t.Errorf("%s: config os %s arch %s created %v, %d history entries; want linux %s %v 2", goarch, cf.OS, cf.Architecture, cf.Created, len(cf.History), goarch, w.created)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers, want 2 (base, binary)", goarch, len(layers))
		}
		for _, l := range layers {
			if mt, _ := l.MediaType(); mt != types.OCILayer {
				t.Errorf("%s: layer media type %s, want %s", goarch, mt, types.OCILayer)
			}
		}
		base, _ := layers[0].Digest()
		baseLayers = append(baseLayers, base)
		checkBaseLayer(t, goarch, layerFiles(t, layers[0]), w.caBundle)
		checkBinaryLayer(t, goarch, layerFiles(t, layers[1]))
	}
	if len(slices.Compact(slices.Clone(baseLayers))) != 1 {
		t.Errorf("base layers %v, want one shared by every architecture", baseLayers)
	}
	return images
}

func layerFiles(t *testing.T, l v1.Layer) map[string]tarFile {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	order, files := readTar(t, b)
	if !slices.IsSorted(order) {
		t.Errorf("layer entries not sorted: %q", order)
	}
	return files
}

func checkBaseLayer(t *testing.T, goarch string, files map[string]tarFile, caBundle []byte) {
	t.Helper()
	want := map[string]int64{"etc/": 0o755, "etc/group": 0o644, "etc/nsswitch.conf": 0o644, "etc/passwd": 0o644,
		"etc/ssl/": 0o755, "etc/ssl/certs/": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "tmp/": 0o1777}
	checkModes(t, goarch+" base layer", files, want)
	if p := string(files["etc/passwd"].data); !strings.Contains(p, "\nsonde:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no user 65532:\n%s", goarch, p)
	}
	if !bytes.Equal(files[caPath].data, caBundle) {
		t.Errorf("%s: the image's CA bundle (%d bytes) is not the build machine's (%d bytes)", goarch, len(files[caPath].data), len(caBundle))
	}
}

func checkBinaryLayer(t *testing.T, goarch string, files map[string]tarFile) {
	t.Helper()
	checkModes(t, goarch+" binary layer", files, map[string]int64{"usr/": 0o755, "usr/local/": 0o755, "usr/local/bin/": 0o755, imageBinary: 0o755})
	sonde := files[imageBinary]
	if sonde.hdr == nil {
		return
	}
	if got, want := sonde.hdr.PAXRecords["SCHILY.xattr.security.capability"], string(fileCapabilities(sondeCapabilities...)); got != want {
		t.Errorf("%s: %s security.capability %x, want %x (cap_net_raw,cap_net_admin,cap_bpf,cap_perfmon+ep)", goarch, imageBinary, got, want)
	}
	checkELF(t, goarch+" "+imageBinary, sonde.data, goarch)
}

// checkModes checks that the layer holds exactly want (names to modes),
// owned by root.
func checkModes(t *testing.T, what string, files map[string]tarFile, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for name, f := range files {
		got[name] = f.hdr.Mode
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 {
			t.Errorf("%s: %s owned by %d:%d, want root", what, name, f.hdr.Uid, f.hdr.Gid)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: files and modes (-want +got):\n%s", what, diff)
	}
}

// checkELF checks that b is a static executable for goarch.
func checkELF(t *testing.T, what string, b []byte, goarch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if f.Machine != knownArches[goarch] {
		t.Errorf("%s: ELF machine %s, want %s", what, f.Machine, knownArches[goarch])
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: dynamically linked", what)
		}
	}
}

// TestImageSmall builds the image of a tiny binary twice: the same inputs
// give the same archive, which is a valid image of the right shape.
func TestImageSmall(t *testing.T) {
	f := validFlags(t, tinyStatic(t))
	args := func(out string) []string {
		return []string{"image", "-version", f.version, "-revision", f.revision, "-epoch", f.epoch, "-bin", f.bin, "-arch", f.arches, "-out", out, "-root", f.root}
	}
	var sums []string
	var first string
	for range 2 {
		out := t.TempDir()
		var stdout bytes.Buffer
		if err := run(context.Background(), args(out), &stdout, io.Discard); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(out, archiveName(f.version))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		sums = append(sums, hex.EncodeToString(sum[:]))
		if !strings.Contains(stdout.String(), "sha256:"+sums[len(sums)-1]) {
			t.Errorf("output %q does not name the archive's sha256", stdout.String())
		}
		if first == "" {
			first = path
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds of the same inputs: %s and %s", sums[0], sums[1])
	}
	ca, err := os.ReadFile(f.caBundle)
	if err != nil {
		t.Fatal(err)
	}
	openArchive(t, first, imageName+":"+f.version).check(t, wantImage{version: f.version, revision: f.revision,
		created: time.Unix(1700000000, 0).UTC(), arches: []string{"amd64"}, caBundle: ca})
}

// TestImage checks the image `make release` built: a valid OCI layout that
// skopeo reads and copies, an index for amd64 and arm64 whose images run
// sonde as 65532 with the file capabilities, and the labels.
func TestImage(t *testing.T) {
	r := built(t)
	ca, err := os.ReadFile(r.caBundle)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(r.dist, archiveName(r.version))
	a := openArchive(t, archive, imageName+":"+r.version)
	a.check(t, wantImage{version: r.version, revision: r.revision, created: r.created, arches: []string{"amd64", "arm64"}, caBundle: ca})

	skopeo := testenv.Tool(t, "skopeo", "skopeo")
	raw := mustRun(t, skopeo, "inspect", "--raw", "oci-archive:"+archive)
	if sum := sha256.Sum256([]byte(raw)); "sha256:"+hex.EncodeToString(sum[:]) != a.digest.String() {
		t.Errorf("skopeo inspect --raw: the manifest it reads is not the index %s", a.digest)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		out := mustRun(t, skopeo, "inspect", "--override-os", "linux", "--override-arch", arch, "--config", "oci-archive:"+archive)
		if !strings.Contains(out, fmt.Sprintf(`"architecture": %q`, arch)) || !strings.Contains(out, `"User": "65532:65532"`) {
			t.Errorf("skopeo inspect --override-arch %s --config:\n%s", arch, out)
		}
	}
	// skopeo copies every image of the index and checks every digest on the way.
	copied := filepath.Join(t.TempDir(), "copy")
	mustRun(t, skopeo, "copy", "--all", "oci-archive:"+archive, "oci:"+copied+":"+r.version)
	if got := mustRun(t, skopeo, "inspect", "--raw", "oci:"+copied+":"+r.version); got != raw {
		t.Errorf("skopeo copy --all changed the index:\n%s\nwant\n%s", got, raw)
	}
}
