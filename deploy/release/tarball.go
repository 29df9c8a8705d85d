package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// tarballName is the file name of an architecture's tarball; its files are
// in a directory of the same name without .tar.gz.
func tarballName(version, goarch string) string {
	return fmt.Sprintf("sonde_%s_linux_%s.tar.gz", version, goarch)
}

// writeTarballs writes, for every architecture, a tarball of the binary,
// the systemd unit (for an install by hand at /usr/local/bin, as its
// comments show), the example configuration and the README.
func writeTarballs(ctx context.Context, in *inputs, out string) ([]artefact, error) {
	var docs []entry
	for _, f := range []struct{ name, src string }{
		{"README.md", readmeSource}, {"sonde.service", unitSource}, {"sonde.yaml", configSource},
	} {
		b, err := os.ReadFile(filepath.Join(in.root, f.src))
		if err != nil {
			return nil, err
		}
		docs = append(docs, file(f.name, 0o644, b))
	}
	var made []artefact
	for _, a := range in.arches {
		if err := ctx.Err(); err != nil {
			return made, err
		}
		bin, err := os.ReadFile(a.bin)
		if err != nil {
			return made, err
		}
		name := tarballName(in.version, a.goarch)
		top := name[:len(name)-len(".tar.gz")]
		entries := []entry{dir(top, 0o755), file(top+"/sonde", 0o755, bin)}
		for _, d := range docs {
			d.name = top + "/" + d.name
			entries = append(entries, d)
		}
		raw, err := tarBytes(entries, in.created)
		if err != nil {
			return made, err
		}
		gz, err := gzipBytes(raw)
		if err != nil {
			return made, err
		}
		art, err := writeFile(out, name, gz)
		if err != nil {
			return made, err
		}
		made = append(made, art)
	}
	return made, nil
}
