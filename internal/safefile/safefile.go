// Package safefile opens the files an operator names to sonde — the
// configuration, targets files, secret files, TLS certificates and keys, the
// state file — so that none of them can hold the daemon:
//
//   - only a regular file is read: the file is opened without waiting
//     (O_NONBLOCK) and checked with fstat, so a FIFO or a device put in a
//     file's place is refused at once instead of blocking until a writer
//     comes ([ErrNotRegular]);
//   - every read is bounded: a file larger than its caller's cap is refused
//     from its size before a byte is read, and one that grows while it is
//     read stops at the cap ([ErrTooLarge]);
//   - a read never outlives its context: the open and the reads run on a
//     goroutine of their own, so a caller whose context ends (a stop, a
//     newer reload) gets an error at once, even when the file system does
//     not answer; the goroutine ends when the system call returns.
//
// The caps of the files sonde reads are the Max constants below.
package safefile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Caps of the files sonde reads, in bytes.
const (
	// MaxConfig bounds a configuration file. Large fleets belong in
	// targets files, CIDR blocks or discovery; a configuration is parsed
	// whole, in memory.
	MaxConfig int64 = 64 << 20
	// MaxTargets bounds a targets file: room for the 16,777,216 targets a
	// configuration may list at 64 bytes a line. It is read a line at a
	// time, never whole.
	MaxTargets int64 = 1 << 30
	// MaxSecret bounds a secret file (an auth token's or a webhook's
	// secret_file) and a TLS private key: a key, not a document.
	MaxSecret int64 = 64 << 10
	// MaxPEM bounds a PEM file of certificates (a CA bundle or a client
	// certificate chain); a system's whole bundle is under a MiB.
	MaxPEM int64 = 4 << 20
)

// ErrNotRegular is returned for a file that is not a regular file (a FIFO,
// a device, a socket, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned (wrapped, with the sizes) for a file larger than
// the cap it is read with.
var ErrTooLarge = errors.New("file too large")

// ErrEmptySecret is returned (wrapped) by [ReadSecret] for a secret file
// that holds only white space.
var ErrEmptySecret = errors.New("secret file is empty")

// File names a file sonde reads and the cap it is read with, for those
// that keep a list of the files a load read (to tell when they change).
type File struct {
	Path string
	Max  int64 // the most bytes the file may hold
}

// Reader reads one regular file opened by [Open], at most its cap. It is
// not safe for concurrent use.
type Reader struct {
	ctx  context.Context
	path string
	info fs.FileInfo
	pr   *io.PipeReader
	stop func() bool // stops the context's watch
}

// opener opens a file and describes it; the seam for tests of files that
// never answer.
type opener func(path string) (io.ReadCloser, fs.FileInfo, error)

// openNonblock opens path for reading without waiting for a FIFO's writer,
// and describes what it opened.
func openNonblock(path string) (io.ReadCloser, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// Open opens the regular file at path for reading, of at most max bytes. It
// fails with [ErrNotRegular] for anything but a regular file, with
// [ErrTooLarge] for a file larger than max, and with ctx's error once ctx
// ends, as does every Read then. Every error is an *fs.PathError naming
// path.
func Open(ctx context.Context, path string, max int64) (*Reader, error) {
	return open(ctx, path, max, openNonblock)
}

func open(ctx context.Context, path string, max int64, op opener) (*Reader, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	type opened struct {
		f    io.ReadCloser
		info fs.FileInfo
		err  error
	}
	ch := make(chan opened, 1)
	go func() {
		f, info, err := op(path)
		if err == nil {
			if err = check(path, info, max); err != nil {
				f.Close()
				f = nil
			}
		}
		ch <- opened{f, info, err}
	}()
	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		go func() { // the open answers some day: close what it opened
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, &fs.PathError{Op: "open", Path: path, Err: ctx.Err()}
	}
	if o.err != nil {
		return nil, o.err
	}
	pr, pw := io.Pipe()
	go pump(pw, o.f, path, max)
	r := &Reader{ctx: ctx, path: path, info: o.info, pr: pr}
	r.stop = context.AfterFunc(ctx, func() { pr.Close() }) // a Read waiting on the file returns
	return r, nil
}

// check refuses a file that is not regular or holds more than max bytes.
func check(path string, info fs.FileInfo, max int64) error {
	if !info.Mode().IsRegular() {
		return &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	if info.Size() > max {
		return tooLarge(path, info.Size(), max)
	}
	return nil
}

func tooLarge(path string, size, max int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, at most %d allowed", ErrTooLarge, size, max)}
}

// pump copies f, up to max bytes, into pw, and closes both: with f's read
// error, ErrTooLarge when f holds more (it grew after the open), or EOF.
// It ends early when the reader is closed.
func pump(pw *io.PipeWriter, f io.ReadCloser, path string, max int64) {
	defer f.Close()
	n, err := io.CopyBuffer(pw, io.LimitReader(f, max+1), make([]byte, 64<<10))
	if err == nil && n > max {
		err = tooLarge(path, n, max)
	}
	pw.CloseWithError(err)
}

// Info describes the file as it was when opened.
func (r *Reader) Info() fs.FileInfo { return r.info }

// Read reads from the file; see [Open] for its errors.
func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.pr.Read(p)
	if err != nil && err != io.EOF && r.ctx.Err() != nil {
		err = &fs.PathError{Op: "read", Path: r.path, Err: r.ctx.Err()}
	}
	return n, err
}

// Close ends the reading; the file is closed once a read in progress
// returns.
func (r *Reader) Close() error {
	r.stop()
	return r.pr.Close()
}

// ReadFile returns the content of the regular file at path, of at most max
// bytes ([Open]).
func ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	r, err := Open(ctx, path, max)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var b bytes.Buffer
	b.Grow(int(min(r.info.Size(), max)) + 1)
	if _, err := b.ReadFrom(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Sum returns the SHA-256 of the content of the regular file at path, of
// at most max bytes ([Open]).
func Sum(ctx context.Context, path string, max int64) ([sha256.Size]byte, error) {
	r, err := Open(ctx, path, max)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return [sha256.Size]byte{}, err
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}

// ReadSecret reads a secret file, one grammar for every secret_file of a
// configuration: its content without surrounding white space (a file
// written by echo works), which must not be empty, from a regular file of
// at most [MaxSecret] bytes. Errors name the path, never the content.
func ReadSecret(ctx context.Context, path string) ([]byte, error) {
	b, err := ReadFile(ctx, path, MaxSecret)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, &fs.PathError{Op: "read", Path: path, Err: ErrEmptySecret}
	}
	return b, nil
}

// Exposed reports whether a file of mode m may be read or written by users
// other than its owner and its group: a secret file should not be.
func Exposed(m fs.FileMode) bool { return m.Perm()&0o006 != 0 }
