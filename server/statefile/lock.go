package statefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/safefile"
)

// ErrUnusable is wrapped by the errors of a state file the daemon must not
// use: one that is not sonde's (a save would overwrite it), one another
// sonde holds, one whose lock cannot be made.
var ErrUnusable = errors.New("unusable state file")

// Claim makes the state file at path the daemon's before it reads or
// writes it. It locks PATH.lock (created when missing, never removed) with
// an exclusive flock, held until the returned file is closed, so that two
// daemons never share a state file: the second fails at its start, where it
// would otherwise restore the other's states and overwrite them. The lock
// is a file of its own because saves rename a new file over PATH, which
// would leave a lock on PATH behind on the old inode. Then it checks that
// PATH, when it exists and is not empty, is a state file (it starts with
// its magic), so that a mistaken -state-file naming some other file is
// refused instead of overwritten.
func Claim(ctx context.Context, path string) (*os.File, error) {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: make its lock: %w", ErrUnusable, path, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is in use by another sonde (it holds the lock on %s.lock); give each daemon a state file of its own",
				ErrUnusable, path, path)
		}
		return nil, fmt.Errorf("%w: %s: lock %s.lock: %w", ErrUnusable, path, path, err)
	}
	if err := checkStateOwner(ctx, path); err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// checkStateOwner reports an error unless the file at path is missing,
// empty, or starts as a state file does (or as much of it as the file
// holds).
func checkStateOwner(ctx context.Context, path string) error {
	f, err := safefile.Open(ctx, path, 1<<62) // only the head is read
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, safefile.ErrNotRegular):
		return fmt.Errorf("%w: %s is not a regular file", ErrUnusable, path)
	case err != nil:
		return fmt.Errorf("%w: %w", ErrUnusable, err)
	}
	defer f.Close()
	var head [len(Magic)]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrUnusable, err)
	}
	if string(head[:n]) != Magic[:n] {
		return fmt.Errorf("%w: %s is not a sonde state file (it does not start with %q) and would be overwritten; name a file of sonde's own, or remove this one",
			ErrUnusable, path, Magic)
	}
	return nil
}
