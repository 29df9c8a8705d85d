package main

import (
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	defaultSource = "https://github.com/sondeprobe/sonde"
	// The .invalid domain is reserved: the package names no real address.
	defaultMaintainer = "sonde developers <sonde@sondeprobe.invalid>"
)

// flags are the command line as given.
type flags struct {
	version, revision, epoch, bin, arches, caBundle, out, root, source, maintainer string
}

// inputs are the checked inputs of every artefact.
type inputs struct {
	version    string
	revision   string
	created    time.Time // the commit's time: every file's date
	source     string
	maintainer string
	root       string
	caBundle   []byte
	arches     []arch // in the order given
}

// arch is one architecture and its binary.
type arch struct {
	goarch  string
	machine elf.Machine
	bin     string // path of the static binary
}

// knownArches are the architectures sonde is released for.
var knownArches = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// versionPattern accepts what is both a Debian version and an OCI tag: a
// digit first, then letters, digits, dots and hyphens, ending in a letter or
// digit (git describe without its v, with -dirty). A hyphen makes the part
// after the last one the Debian revision.
var versionPattern = regexp.MustCompile(`^[0-9]([A-Za-z0-9.-]{0,126}[A-Za-z0-9])?$`)

var revisionPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// maxEpoch is the end of year 9999: tar and the OCI formats write later
// dates, but nothing built today carries one.
const maxEpoch = 253402300799

func (f *flags) inputs() (*inputs, error) {
	in := &inputs{version: f.version, revision: f.revision, source: f.source, maintainer: f.maintainer, root: f.root}
	if !versionPattern.MatchString(f.version) {
		return nil, fmt.Errorf("-version %q: want a digit, then up to 127 letters, digits, dots and hyphens, ending in a letter or digit (git describe without its v)", f.version)
	}
	if !revisionPattern.MatchString(f.revision) {
		return nil, fmt.Errorf("-revision %q: want a full commit hash, 40 or 64 lowercase hex digits", f.revision)
	}
	sec, err := strconv.ParseInt(f.epoch, 10, 64)
	if err != nil || sec < 0 || sec > maxEpoch {
		return nil, fmt.Errorf("-epoch %q: want seconds since 1970, 0..%d", f.epoch, int64(maxEpoch))
	}
	in.created = time.Unix(sec, 0).UTC()
	if !strings.HasPrefix(f.source, "https://") || strings.ContainsAny(f.source, " \t\n\"") {
		return nil, fmt.Errorf("-source %q: want an https:// URL", f.source)
	}
	if !strings.Contains(f.maintainer, "<") || strings.ContainsAny(f.maintainer, "\n") {
		return nil, fmt.Errorf("-maintainer %q: want a name and <address> on one line", f.maintainer)
	}
	for _, a := range strings.Fields(f.arches) {
		machine, ok := knownArches[a]
		if !ok {
			return nil, fmt.Errorf("-arch %q: unknown architecture %q, want amd64 or arm64", f.arches, a)
		}
		if slices.ContainsFunc(in.arches, func(x arch) bool { return x.goarch == a }) {
			return nil, fmt.Errorf("-arch %q: %s twice", f.arches, a)
		}
		bin := filepath.Join(f.bin, "linux_"+a, "sonde")
		if err := checkStatic(bin, machine); err != nil {
			return nil, fmt.Errorf("-bin %s: %w", f.bin, err)
		}
		in.arches = append(in.arches, arch{goarch: a, machine: machine, bin: bin})
	}
	if len(in.arches) == 0 {
		return nil, fmt.Errorf("-arch %q: want at least one of amd64, arm64", f.arches)
	}
	if in.caBundle, err = readCABundle(f.caBundle); err != nil {
		return nil, fmt.Errorf("-ca-bundle: %w", err)
	}
	return in, nil
}

// checkStatic checks that path is a static Linux executable for machine:
// the image has no libc, and a binary of another architecture would only
// fail when run.
func checkStatic(path string, machine elf.Machine) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		return fmt.Errorf("%s: %s %s, want an executable for %s", path, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("%s: dynamically linked, want a static binary (CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// maxCABundle bounds the CA bundle read into memory (Debian's is ~220 kB).
const maxCABundle = 8 << 20

// readCABundle reads a PEM file of CA certificates and checks that every
// block in it is a certificate that parses.
func readCABundle(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCABundle+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxCABundle {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxCABundle)
	}
	n := 0
	for rest := b; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if strings.TrimSpace(string(rest)) != "" {
				return nil, fmt.Errorf("%s: text after certificate %d is not PEM", path, n)
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: block %d is a %q, want CERTIFICATE", path, n+1, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, n+1, err)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no certificates", path)
	}
	return b, nil
}

// artefact is a file written to the output directory.
type artefact struct {
	path   string
	size   int64
	sha256 string
	note   string // what else to know, such as the image's digest
}

func (a artefact) String() string {
	s := fmt.Sprintf("%s\t%d bytes\tsha256:%s", a.path, a.size, a.sha256)
	if a.note != "" {
		s += "\t" + a.note
	}
	return s
}

// writeFile writes data to dir/name through a temporary file, so that an
// interrupted build leaves no partial artefact under the final name.
func writeFile(dir, name string, data []byte) (artefact, error) {
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return artefact{}, err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return artefact{}, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return artefact{}, err
	}
	if err := tmp.Close(); err != nil {
		return artefact{}, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return artefact{}, err
	}
	sum := sha256.Sum256(data)
	return artefact{path: path, size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}, nil
}

// writeSums writes SHA256SUMS for the artefacts, in the format of
// `sha256sum -c`, sorted by name.
func writeSums(dir string, made []artefact) (artefact, error) {
	lines := make([]string, 0, len(made))
	for _, a := range made {
		lines = append(lines, a.sha256+"  "+filepath.Base(a.path)+"\n")
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return writeFile(dir, "SHA256SUMS", []byte(strings.Join(lines, "")))
}
