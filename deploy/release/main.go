// Command sonde-release packages sonde's static binaries for release: an
// OCI image index (make image), Debian packages (make deb), and with them
// tarballs and SHA256SUMS (make release). Every artefact is reproducible:
// the same binaries, CA bundle, version and time give the same bytes.
//
// It is a module of its own, so that sonde does not link the image and
// package libraries. The Makefile builds it and passes the version, commit
// and time it takes from git:
//
//	sonde-release image|deb|release -version V -revision R -epoch T -bin DIR -arch 'amd64 arm64' -ca-bundle FILE -out DIR
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

const usage = `Usage: sonde-release image|deb|release [flags]

  image    the OCI image index, an oci-archive: OUT/sonde_VERSION_oci.tar
  deb      a Debian package per architecture: OUT/sonde_VERSION_ARCH.deb
  release  both, a tarball per architecture (OUT/sonde_VERSION_linux_ARCH.tar.gz)
           and OUT/SHA256SUMS

The binary of each architecture is BIN/linux_ARCH/sonde, a static build.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sonde-release:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sonde-release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var f flags
	fs.StringVar(&f.version, "version", "", "the `version`: 1.2.0, 1.2.0-3-g1a2b3c4d5e6f (git describe without its v)")
	fs.StringVar(&f.revision, "revision", "", "the `commit` the binaries were built from, in full")
	fs.StringVar(&f.epoch, "epoch", "", "the date of every file, in `seconds` since 1970 (the commit's time)")
	fs.StringVar(&f.bin, "bin", "bin/release", "`directory` of the binaries: DIR/linux_ARCH/sonde")
	fs.StringVar(&f.arches, "arch", "amd64 arm64", "the `architectures`, separated by spaces: amd64, arm64")
	fs.StringVar(&f.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM `file` of the CA certificates the image carries")
	fs.StringVar(&f.out, "out", "dist", "`directory` the artefacts are written to")
	fs.StringVar(&f.root, "root", ".", "sonde's source `directory`: the unit, the example configuration and the README")
	fs.StringVar(&f.source, "source", defaultSource, "the source repository's `URL`, in the image's labels and the package's Homepage")
	fs.StringVar(&f.maintainer, "maintainer", defaultMaintainer, "the Debian package's `Maintainer`")
	if len(args) == 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	in, err := f.inputs()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	var made []artefact
	switch cmd {
	case "image":
		made, err = writeImage(ctx, in, f.out)
	case "deb":
		made, err = writeDebs(ctx, in, f.out)
	case "release":
		made, err = writeRelease(ctx, in, f.out)
	default:
		return fmt.Errorf("unknown command %q: want image, deb or release", cmd)
	}
	for _, a := range made {
		fmt.Fprintln(stdout, a)
	}
	return err
}

// writeRelease writes every artefact and a SHA256SUMS file of them. The
// image, the packages and the tarballs are made at once: compressing them
// is most of the time, and each needs one core.
func writeRelease(ctx context.Context, in *inputs, out string) ([]artefact, error) {
	writers := []func(context.Context, *inputs, string) ([]artefact, error){writeImage, writeDebs, writeTarballs}
	made := make([][]artefact, len(writers))
	errs := make([]error, len(writers))
	var wg sync.WaitGroup
	for i, write := range writers {
		wg.Go(func() { made[i], errs[i] = write(ctx, in, out) })
	}
	wg.Wait()
	all := slices.Concat(made...)
	if err := errors.Join(errs...); err != nil {
		return all, err
	}
	sums, err := writeSums(out, all)
	if err != nil {
		return all, err
	}
	return append(all, sums), nil
}
