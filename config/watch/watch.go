// Package watch tells when the content of a set of files changes, so that
// the daemon reloads its configuration by itself.
//
// A [Watcher] watches directories, not files, with fsnotify (inotify on
// Linux): the directory of each file and of every symbolic link met while
// resolving its path. That sees an editor that replaces a file by renaming
// a new one over it, and Kubernetes updating a mounted ConfigMap, which writes the new files into a
// new directory and atomically replaces the "..data" symbolic link the file
// names resolve through. Events only start a look at the files: after a
// quiet time (debounce), each file is read and hashed, and a change is
// reported only when some file's content differs from the last look, so a
// touch, a rewrite of the same bytes or an unrelated file in the directory
// reports nothing.
package watch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sondeprobe/sonde/internal/safefile"
)

// DefaultDebounce is the quiet time after the last event before the files
// are read, unless Options say otherwise.
const DefaultDebounce = time.Second

// Options configure a [Watcher]. The zero value is ready to use.
type Options struct {
	// Debounce is the quiet time after the last event before the files are
	// read; 0 means DefaultDebounce. Events that keep coming delay the look
	// by at most 10 debounces.
	Debounce time.Duration
	// Checked, when set, is called after every look at the files with
	// whether their content changed.
	Checked func(changed bool)
	// Error, when set, receives the errors the watcher carries on after: a
	// directory it cannot watch (it tries again at the next look).
	Error func(error)
}

// Watcher reports changes of the content of a set of files on
// [Watcher.Changes]. Its methods are safe for concurrent use; [Watcher.Run]
// runs once.
type Watcher struct {
	opt     Options
	fsw     *fsnotify.Watcher
	changes chan struct{}
	setc    chan struct{}

	mu      sync.Mutex
	pending []safefile.File // files given to SetFiles, not yet taken by Run

	// Owned by Run (and New before it).
	files []safefile.File
	sums  map[string]sum
	dirs  map[string]map[string]bool // watched directory → names that matter in it
}

// sum is a file's content hash; ok is false when it cannot be read.
type sum struct {
	ok  bool
	sha [sha256.Size]byte
}

// New watches files and takes their content as the baseline: only a change
// from what they hold now is reported. Call it before reading the files, so
// that no change after the read goes unseen. ctx bounds this first reading.
// It fails when the system cannot watch files (inotify instances
// exhausted).
func New(ctx context.Context, files []safefile.File, opt Options) (*Watcher, error) {
	if opt.Debounce <= 0 {
		opt.Debounce = DefaultDebounce
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch files: %w", err)
	}
	w := &Watcher{
		opt:     opt,
		fsw:     fsw,
		changes: make(chan struct{}, 1),
		setc:    make(chan struct{}, 1),
		sums:    map[string]sum{},
		dirs:    map[string]map[string]bool{},
	}
	w.take(ctx, files)
	return w, nil
}

// Changes receives a value after the content of the files changed. Values
// do not queue: one pending value stands for every change since it was
// sent.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

// SetFiles replaces the set of files watched, for instance with those of a
// configuration just loaded. Files already watched keep their baseline; the
// others take their content now as theirs.
func (w *Watcher) SetFiles(files []safefile.File) {
	w.mu.Lock()
	w.pending = slices.Clone(files)
	w.mu.Unlock()
	select {
	case w.setc <- struct{}{}:
	default:
	}
}

// Run watches until ctx is done, then releases what it watched with. It
// returns nil then, or the error that stopped it earlier.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.fsw.Close()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // first event since the last look; zero: none
	for {
		matters := false
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return errors.New("file events ended")
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				if w.opt.Error != nil {
					w.opt.Error(fmt.Errorf("watch files: %w", err))
				}
				continue
			}
			matters = true // events were lost: look at the files
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return errors.New("file events ended")
			}
			matters = w.matters(ev)
		case <-w.setc:
			w.mu.Lock()
			files := w.pending
			w.mu.Unlock()
			w.take(ctx, files)
		case <-timer.C:
			first = time.Time{}
			changed := w.look(ctx)
			if changed {
				select {
				case w.changes <- struct{}{}:
				default:
				}
			}
			if w.opt.Checked != nil {
				w.opt.Checked(changed)
			}
		}
		if !matters {
			continue
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		timer.Reset(min(w.opt.Debounce, first.Add(10*w.opt.Debounce).Sub(now)))
	}
}

// take makes files the watched set: watches for them, and baselines for
// files not watched before.
func (w *Watcher) take(ctx context.Context, files []safefile.File) {
	w.files = slices.Clone(files)
	w.rewatch()
	next := make(map[string]sum, len(files))
	for _, f := range w.files {
		s, ok := w.sums[f.Path]
		if !ok {
			s = hashFile(ctx, f)
		}
		next[f.Path] = s
	}
	w.sums = next
}

// look updates the watches, then hashes every file and reports whether any
// differs from the last look.
func (w *Watcher) look(ctx context.Context) bool {
	w.rewatch() // first: a change after the hashing below makes an event
	changed := false
	for _, f := range w.files {
		s := hashFile(ctx, f)
		if s != w.sums[f.Path] {
			changed = true
		}
		w.sums[f.Path] = s
	}
	return changed
}

// hashFile hashes the content of the regular file f; a file that cannot be
// read, is not a regular file (opened without waiting: a FIFO must not stop
// the watcher) or is larger than its cap (not read: it is refused by its
// size) has no sum.
func hashFile(ctx context.Context, f safefile.File) sum {
	sha, err := safefile.Sum(ctx, f.Path, f.Max)
	return sum{ok: err == nil, sha: sha}
}

// rewatch watches the directories where the files' paths can change and
// drops the watches no longer needed.
func (w *Watcher) rewatch() {
	want := map[string]map[string]bool{}
	for _, f := range w.files {
		for _, p := range pathPoints(f.Path) {
			if want[p.dir] == nil {
				want[p.dir] = map[string]bool{}
			}
			want[p.dir][p.name] = true
		}
	}
	dirs := make(map[string]map[string]bool, len(want))
	for dir, names := range want {
		// Added again even when watched: a directory deleted and made
		// again under the same name is a new one.
		if err := w.fsw.Add(dir); err != nil {
			if w.opt.Error != nil && !errors.Is(err, fs.ErrNotExist) {
				w.opt.Error(fmt.Errorf("watch %s: %w", dir, err))
			}
			continue
		}
		dirs[dir] = names
	}
	for dir := range w.dirs {
		if dirs[dir] == nil {
			_ = w.fsw.Remove(dir) // gone already when the directory was deleted
		}
	}
	w.dirs = dirs
}

// matters reports whether an event can change a watched file: it names a
// watched entry, or is the removal or renaming of a watched directory
// itself.
func (w *Watcher) matters(ev fsnotify.Event) bool {
	if _, ok := w.dirs[ev.Name]; ok && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
		return true
	}
	return w.dirs[filepath.Dir(ev.Name)][filepath.Base(ev.Name)]
}

// point is a directory entry whose change can change what a path names.
type point struct{ dir, name string }

// maxLinks bounds the symbolic links followed in one path, as the kernel
// does (ELOOP).
const maxLinks = 40

// pathPoints returns the entries a path depends on: every symbolic link met
// while resolving it, component by component, and the entry it finally
// names. Resolution stops at the first missing component, which is included
// (its creation is a change).
func pathPoints(path string) []point {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	var out []point
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return append(out, point{cur, c})
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(rest) == 0 {
				out = append(out, point{cur, c})
			}
			cur = next
			continue
		}
		out = append(out, point{cur, c})
		if links++; links > maxLinks {
			return out
		}
		target, err := os.Readlink(next)
		if err != nil {
			return out
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return out
}
