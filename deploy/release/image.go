package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The image's fixed facts, which deploy/kubernetes and the tests rely on.
const (
	imageName   = "sonde" // the repository part of the reference: sonde:VERSION
	imageBinary = "usr/local/bin/sonde"
	imageUID    = 65532 // the non-root user; the StatefulSet runs as it
	caPath      = "etc/ssl/certs/ca-certificates.crt"
	imagePath   = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// imageCmd is what the image runs without arguments: the daemon with its
// configuration at /etc/sonde (a ConfigMap or a volume), serving on every
// address of the container. Kubernetes's args replace it.
var imageCmd = []string{"run", "-config", "/etc/sonde/sonde.yaml", "-listen", ":9123"}

// archiveName is the oci-archive's file name.
func archiveName(version string) string { return "sonde_" + version + "_oci.tar" }

// writeImage builds the image index and writes it as an oci-archive.
func writeImage(ctx context.Context, in *inputs, out string) ([]artefact, error) {
	idx, err := buildIndex(ctx, in)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeOCIArchive(&buf, idx, imageName+":"+in.version, in); err != nil {
		return nil, err
	}
	a, err := writeFile(out, archiveName(in.version), buf.Bytes())
	if err != nil {
		return nil, err
	}
	a.note = fmt.Sprintf("image %s:%s index %s", imageName, in.version, idx.digest)
	return []artefact{a}, nil
}

// labels are the image's OCI labels, also set as annotations on its
// manifests and index.
func labels(in *inputs) map[string]string {
	return map[string]string{
		ocispec.AnnotationTitle:       "sonde",
		ocispec.AnnotationDescription: "Health prober for large fleets: TCP SYN probes with eBPF reply capture, HTTP(S) and connect() checks",
		ocispec.AnnotationVersion:     in.version,
		ocispec.AnnotationRevision:    in.revision,
		ocispec.AnnotationSource:      in.source,
		ocispec.AnnotationCreated:     in.created.Format(time.RFC3339),
	}
}

// index is an image index: its manifest and the images it lists.
type index struct {
	raw    []byte
	digest digest.Digest
	images []v1.Image
}

// buildIndex builds the image of every architecture and an index of them.
// The image has two layers: the base (users, CA certificates; the same for
// every architecture, so stored once) and the binary.
func buildIndex(ctx context.Context, in *inputs) (*index, error) {
	base, err := baseLayer(in)
	if err != nil {
		return nil, err
	}
	idx := &index{}
	spec := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Annotations: labels(in)}
	for _, a := range in.arches {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		img, err := buildImage(in, a, base)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", a.goarch, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		size, err := img.Size()
		if err != nil {
			return nil, err
		}
		idx.images = append(idx.images, img)
		spec.Manifests = append(spec.Manifests, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest,
			Digest: digest.Digest(d.String()), Size: size, Platform: &ocispec.Platform{OS: "linux", Architecture: a.goarch}})
	}
	// The index is serialised with the specification's own types, as skopeo
	// serialises the index it copies: skopeo copy --all then writes the
	// same bytes to a registry, and the digest make image prints is the one
	// the registry has. (go-containerregistry's index would add an
	// artifactType to each image and order fields otherwise, and a copy
	// would change its digest.)
	if idx.raw, err = json.Marshal(spec); err != nil {
		return nil, err
	}
	idx.digest = digest.FromBytes(idx.raw)
	return idx, nil
}

// baseLayer holds what every architecture shares: /etc/passwd and
// /etc/group naming root and the user 65532 (sonde), nsswitch.conf for Go's
// resolver, the CA certificates for HTTPS checks, and /tmp.
func baseLayer(in *inputs) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nsonde:x:%d:%d:sonde:/nonexistent:/sbin/nologin\n", imageUID, imageUID)
	group := fmt.Sprintf("root:x:0:\nsonde:x:%d:\n", imageUID)
	return layer([]entry{
		dir("etc", 0o755),
		file("etc/group", 0o644, []byte(group)),
		file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("etc/ssl", 0o755),
		dir("etc/ssl/certs", 0o755),
		file(caPath, 0o644, in.caBundle),
		dir("tmp", 0o1777),
	}, in)
}

// binaryLayer holds the binary, owned by root, with the file capabilities
// that a non-root sonde gets its privileges from.
func binaryLayer(in *inputs, a arch) (v1.Layer, error) {
	bin, err := os.ReadFile(a.bin)
	if err != nil {
		return nil, err
	}
	sonde := file(imageBinary, 0o755, bin)
	sonde.xattrs = map[string][]byte{"security.capability": fileCapabilities(sondeCapabilities...)}
	return layer([]entry{dir("usr", 0o755), dir("usr/local", 0o755), dir("usr/local/bin", 0o755), sonde}, in)
}

// layer makes a gzip-compressed OCI layer of entries.
func layer(entries []entry, in *inputs) (v1.Layer, error) {
	raw, err := tarBytes(entries, in.created)
	if err != nil {
		return nil, err
	}
	gz, err := gzipBytes(raw)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// buildImage builds the image of one architecture on the shared base layer.
func buildImage(in *inputs, a arch, base v1.Layer) (v1.Image, error) {
	bin, err := binaryLayer(in, a)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: in.created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: a.goarch,
		OS:           "linux",
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:         fmt.Sprintf("%d:%d", imageUID, imageUID),
			Entrypoint:   []string{"sonde"},
			Cmd:          slices.Clone(imageCmd),
			Env:          []string{imagePath},
			WorkingDir:   "/",
			ExposedPorts: map[string]struct{}{"9123/tcp": {}},
			Labels:       labels(in),
		},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "sonde-release: /etc/passwd, /etc/group (sonde is 65532), /etc/nsswitch.conf, CA certificates, /tmp"}},
		mutate.Addendum{Layer: bin, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "sonde-release: /usr/local/bin/sonde with cap_net_raw,cap_net_admin,cap_bpf,cap_perfmon+ep"}})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels(in)).(v1.Image), nil
}

// writeOCIArchive writes idx as an OCI image layout in a tar archive (the
// oci-archive of skopeo and podman): oci-layout, index.json naming the
// index ref, and every blob once, in a fixed order with fixed dates.
func writeOCIArchive(w io.Writer, idx *index, ref string, in *inputs) error {
	blobs := map[string][]byte{}
	add := func(h v1.Hash, b []byte) error {
		if sum := sha256.Sum256(b); h.Algorithm != "sha256" || h.Hex != hex.EncodeToString(sum[:]) {
			return fmt.Errorf("blob %s: its sha256 is %x", h, sum)
		}
		blobs[h.Hex] = b
		return nil
	}
	if err := add(v1.Hash{Algorithm: idx.digest.Algorithm().String(), Hex: idx.digest.Encoded()}, idx.raw); err != nil {
		return err
	}
	for _, img := range idx.images {
		if err := addImage(img, add); err != nil {
			return err
		}
	}
	top, err := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageIndex, Digest: idx.digest, Size: int64(len(idx.raw)),
			Annotations: map[string]string{ocispec.AnnotationRefName: ref}}}})
	if err != nil {
		return err
	}
	entries := []entry{
		file("oci-layout", 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)),
		file("index.json", 0o644, top),
		dir("blobs", 0o755),
		dir("blobs/sha256", 0o755),
	}
	for h, b := range blobs {
		entries = append(entries, file("blobs/sha256/"+h, 0o644, b))
	}
	b, err := tarBytes(entries, in.created)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// addImage adds an image's manifest, config and layers to the blobs.
func addImage(img v1.Image, add func(v1.Hash, []byte) error) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	if err := add(d, raw); err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	name, err := img.ConfigName()
	if err != nil {
		return err
	}
	if err := add(name, cfg); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := add(d, b); err != nil {
			return err
		}
	}
	return nil
}
