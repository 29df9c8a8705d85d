package safefile

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

func write(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func TestReadFile(t *testing.T) {
	p := write(t, "f", "hello\n", 0o600)
	b, err := ReadFile(t.Context(), p, 6)
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	sum, err := Sum(t.Context(), p, 6)
	if err != nil || sum != sha256.Sum256([]byte("hello\n")) {
		t.Fatalf("Sum = %x, %v", sum, err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(t.Context(), link, 6); err != nil || string(b) != "hello\n" {
		t.Fatalf("ReadFile through a symbolic link = %q, %v", b, err)
	}
}

// TestRefused: what is not a regular file of at most the cap is refused at
// once, without a read; a FIFO without a writer does not block.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil { // sparse: 2 GiB of size, no blocks
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		name, path string
		want       error
	}{
		{"fifo", fifo, ErrNotRegular},
		{"directory", dir, ErrNotRegular},
		{"device", "/dev/zero", ErrNotRegular},
		{"missing", filepath.Join(dir, "none"), fs.ErrNotExist},
		{"too large", big, ErrTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			testenv.ReturnsWithin(t, "ReadFile", func() { _, err = ReadFile(t.Context(), c.path, MaxSecret) })
			var pe *fs.PathError
			if !errors.Is(err, c.want) || !errors.As(err, &pe) || pe.Path != c.path {
				t.Fatalf("ReadFile(%s) = %v, want %v in a PathError naming the file", c.path, err, c.want)
			}
		})
	}
}

// fakeInfo describes a regular file of size bytes.
type fakeInfo struct{ size int64 }

func (i fakeInfo) Name() string       { return "fake" }
func (i fakeInfo) Size() int64        { return i.size }
func (i fakeInfo) Mode() fs.FileMode  { return 0o600 }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return false }
func (i fakeInfo) Sys() any           { return nil }

// closeSignal is a ReadCloser that tells when it is closed.
type closeSignal struct {
	io.Reader
	once   *sync.Once
	closed chan struct{}
}

func newCloseSignal(r io.Reader) closeSignal {
	return closeSignal{r, &sync.Once{}, make(chan struct{})}
}

func (c closeSignal) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

// TestGrows: a file that holds more than its cap when read (it grew after
// the open) is refused at the cap.
func TestGrows(t *testing.T) {
	op := func(string) (io.ReadCloser, fs.FileInfo, error) {
		return io.NopCloser(strings.NewReader("0123456789")), fakeInfo{4}, nil
	}
	r, err := open(t.Context(), "grows", 8, op)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("read = %v, want ErrTooLarge", err)
	}
}

// TestCancelledRead: a read that the file system does not answer ends when
// the context does, and the file is closed once the read returns.
func TestCancelledRead(t *testing.T) {
	pr, pw, err := os.Pipe() // a reader nobody writes to: the read blocks
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pw.Close() })
	f := newCloseSignal(pr)
	op := func(string) (io.ReadCloser, fs.FileInfo, error) { return f, fakeInfo{100}, nil }
	ctx, cancel := context.WithCancel(t.Context())
	r, err := open(ctx, "slow", 100, op)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(r)
		readErr <- err
	}()
	cancel()
	testenv.ReturnsWithin(t, "a read after its context ended", func() { err = <-readErr })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("read = %v, want context.Canceled", err)
	}
	r.Close()
	pw.Write([]byte("late")) // the read returns: the pump sees the closed reader and closes the file
	pw.Close()
	testenv.ReturnsWithin(t, "closing the file", func() { <-f.closed })
}

// TestCancelledOpen: an open that the file system does not answer ends when
// the context does; what it opens later is closed.
func TestCancelledOpen(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	f := newCloseSignal(strings.NewReader("x"))
	op := func(string) (io.ReadCloser, fs.FileInfo, error) {
		close(entered)
		<-release
		return f, fakeInfo{1}, nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := open(ctx, "hung", 10, op)
		errc <- err
	}()
	<-entered
	cancel()
	var err error
	testenv.ReturnsWithin(t, "an open after its context ended", func() { err = <-errc })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("open = %v, want context.Canceled", err)
	}
	close(release)
	testenv.ReturnsWithin(t, "closing the late file", func() { <-f.closed })
}

func TestReadSecret(t *testing.T) {
	if b, err := ReadSecret(t.Context(), write(t, "s", "  s3cret \r\n", 0o600)); err != nil || string(b) != "s3cret" {
		t.Fatalf("ReadSecret = %q, %v", b, err)
	}
	if _, err := ReadSecret(t.Context(), write(t, "e", " \n\t", 0o600)); !errors.Is(err, ErrEmptySecret) {
		t.Fatalf("ReadSecret of white space = %v, want ErrEmptySecret", err)
	}
	if _, err := ReadSecret(t.Context(), write(t, "b", strings.Repeat("k", int(MaxSecret)+1), 0o600)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadSecret of %d bytes = %v, want ErrTooLarge", MaxSecret+1, err)
	}
}

func TestExposed(t *testing.T) {
	for m, want := range map[fs.FileMode]bool{0o600: false, 0o640: false, 0o440: false, 0o644: true, 0o602: true, 0o601: false} {
		if got := Exposed(m); got != want {
			t.Errorf("Exposed(%v) = %v, want %v", m, got, want)
		}
	}
}
