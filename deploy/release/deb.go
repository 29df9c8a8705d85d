package main

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// The maintainer scripts: daemon-reload, restart on upgrade, stop on
// removal, clean-up on purge, each only where systemd runs.
//
//go:embed debian/postinst debian/prerm debian/postrm
var maintainerScripts embed.FS

// Where the package puts its files, and where they come from in the tree.
const (
	debBinary     = "/usr/bin/sonde"
	debUnit       = "/usr/lib/systemd/system/sonde.service"
	debConfig     = "/etc/sonde/sonde.yaml"
	debDoc        = "/usr/share/doc/sonde/README.md"
	unitSource    = "deploy/systemd/sonde.service"
	configSource  = "examples/sonde.yaml"
	readmeSource  = "README.md"
	manualBinary  = "/usr/local/bin/sonde" // the unit's ExecStart for an install by hand
	debPackage    = "sonde"
	debSection    = "net"
	debCompressor = "xz"
)

// debName is the package's file name.
func debName(version, goarch string) string {
	return fmt.Sprintf("%s_%s_%s.deb", debPackage, version, goarch)
}

// writeDebs writes a Debian package for every architecture.
func writeDebs(ctx context.Context, in *inputs, out string) ([]artefact, error) {
	tmp, err := os.MkdirTemp("", "sonde-deb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	unit, err := os.ReadFile(filepath.Join(in.root, unitSource))
	if err != nil {
		return nil, err
	}
	if unit, err = packagedUnit(unit); err != nil {
		return nil, fmt.Errorf("%s: %w", unitSource, err)
	}
	unitFile := filepath.Join(tmp, "sonde.service")
	if err := os.WriteFile(unitFile, unit, 0o644); err != nil {
		return nil, err
	}
	var scripts nfpm.Scripts
	for name, dst := range map[string]*string{"postinst": &scripts.PostInstall, "prerm": &scripts.PreRemove, "postrm": &scripts.PostRemove} {
		b, err := maintainerScripts.ReadFile("debian/" + name)
		if err != nil {
			return nil, err
		}
		*dst = filepath.Join(tmp, name)
		if err := os.WriteFile(*dst, b, 0o755); err != nil {
			return nil, err
		}
	}
	var made []artefact
	for _, a := range in.arches {
		if err := ctx.Err(); err != nil {
			return made, err
		}
		var buf bytes.Buffer
		if err := deb.Default.Package(debInfo(in, a, unitFile, scripts), &buf); err != nil {
			return made, fmt.Errorf("package for %s: %w", a.goarch, err)
		}
		art, err := writeFile(out, debName(in.version, a.goarch), buf.Bytes())
		if err != nil {
			return made, err
		}
		made = append(made, art)
	}
	return made, nil
}

// debInfo describes the package of one architecture. The version is the
// release's as it is: Debian reads 1.2.0-3-g1a2b3c4d5e6f as upstream
// 1.2.0-3 and revision g1a2b3c4d5e6f, which sorts after 1.2.0 and before
// 1.2.0-4-…, as git describe does.
func debInfo(in *inputs, a arch, unitFile string, scripts nfpm.Scripts) *nfpm.Info {
	fi := func(mode os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: in.created}
	}
	info := &nfpm.Info{
		Name:          debPackage,
		Arch:          a.goarch,
		Platform:      "linux",
		Version:       in.version,
		VersionSchema: "none",
		Section:       debSection,
		Priority:      "optional",
		Maintainer:    in.maintainer,
		Homepage:      in.source,
		Description: "health prober for large fleets\n" +
			"sonde probes TCP endpoints with raw SYNs whose replies an eBPF program\n" +
			"catches, and HTTP(S) and connect() checks, and says within a known time\n" +
			"which endpoints are healthy: Prometheus metrics, a JSON API, a status\n" +
			"page and webhooks. The unit runs it with only CAP_NET_RAW, CAP_NET_ADMIN,\n" +
			"CAP_BPF and CAP_PERFMON; it is installed but not enabled.",
		MTime: in.created,
		Overridables: nfpm.Overridables{
			// Go's TLS reads the system's CA bundle for HTTPS checks.
			Recommends: []string{"ca-certificates"},
			Contents: files.Contents{
				{Source: a.bin, Destination: debBinary, FileInfo: fi(0o755)},
				{Source: unitFile, Destination: debUnit, FileInfo: fi(0o644)},
				{Source: filepath.Join(in.root, configSource), Destination: debConfig, Type: files.TypeConfig, FileInfo: fi(0o644)},
				{Source: filepath.Join(in.root, readmeSource), Destination: debDoc, FileInfo: fi(0o644)},
			},
			Scripts: scripts,
			Deb:     nfpm.Deb{Compression: debCompressor},
		},
	}
	return nfpm.WithDefaults(info)
}

// packagedUnit returns the unit of deploy/systemd as the package installs
// it: starting /usr/bin/sonde, where a Debian package puts programs, rather
// than /usr/local/bin/sonde, where an operator installs one by hand.
func packagedUnit(unit []byte) ([]byte, error) {
	var b strings.Builder
	n := 0
	for line := range strings.Lines(string(unit)) {
		if rest, ok := strings.CutPrefix(line, "ExecStart="+manualBinary+" "); ok {
			line = "ExecStart=" + debBinary + " " + rest
			n++
		}
		b.WriteString(line)
	}
	if n != 1 {
		return nil, fmt.Errorf("%d lines ExecStart=%s …, want 1", n, manualBinary)
	}
	return []byte(b.String()), nil
}
