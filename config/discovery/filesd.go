package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/internal/safefile"
)

// fileDebounce is the quiet time after a change in a watched directory
// before the files are read again: a file written in several steps is read
// once, when it is complete.
const fileDebounce = 100 * time.Millisecond

// fileFeed runs a file_sd source: it reads every file its patterns match at
// start, when something changes in their directories and every refresh
// interval, and sends one update per reading, so a change across several
// files is applied at once. It reads as Prometheus's file discovery does —
// JSON or YAML lists of groups, "__meta_filepath" on each group, a file that
// cannot be read keeps the groups it gave last — with two differences: only
// regular files are read, none over MaxDocumentBytes (MaxYAMLDocumentBytes
// for YAML), and JSON is read as a stream.
type fileFeed struct {
	cfg  *FileSD
	seen map[string]bool // files of the last update
}

func (f *fileFeed) run(ctx context.Context, out feedOut) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		out.fail(fmt.Sprintf("cannot watch files: %v", err))
	} else {
		defer w.Close()
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	f.seen = map[string]bool{}
	f.refresh(ctx, out, w)
	tick := time.NewTicker(f.cfg.RefreshInterval)
	defer tick.Stop()
	var quiet <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			if ev.Name != "" && ev.Op != fsnotify.Chmod && quiet == nil {
				quiet = time.After(fileDebounce)
			}
		case err := <-errs:
			if err != nil {
				out.fail(fmt.Sprintf("watching files: %v", err))
			}
		case <-quiet:
			quiet = nil
			f.refresh(ctx, out, w)
		case <-tick.C:
			f.refresh(ctx, out, w) // a directory that could not be watched is tried again
		}
	}
}

// refresh reads the files the patterns match and sends them as one update:
// a chunk per file read, the removal of files gone. A file that cannot be
// read keeps what it gave; its failure is noted after the update, so the
// source reports failing while any of its files does. When every file
// fails, nothing is sent.
func (f *fileFeed) refresh(ctx context.Context, out feedOut, w *fsnotify.Watcher) {
	var fails []string
	var paths []string
	for _, p := range f.cfg.Files {
		m, err := filepath.Glob(p)
		if err != nil {
			fails = append(fails, fmt.Sprintf("pattern %q: %v", p, err))
			continue
		}
		paths = append(paths, m...)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	up := map[string]*chunk{}
	now := map[string]bool{}
	for _, p := range paths {
		if ctx.Err() != nil {
			return
		}
		now[p] = true
		c, err := readSDFile(ctx, p)
		if err != nil {
			fails = append(fails, fmt.Sprintf("reading %s: %v", p, err))
			continue
		}
		up[p] = c
	}
	for p := range f.seen {
		if !now[p] {
			up[p] = nil
		}
	}
	f.seen = now
	if w != nil {
		for _, p := range f.cfg.Files {
			dir := filepath.Dir(p)
			if err := w.Add(dir); err != nil {
				fails = append(fails, fmt.Sprintf("cannot watch directory %s: %v", dir, err))
			}
		}
	}
	if len(up) > 0 || len(fails) == 0 {
		out.send(up)
	}
	for _, msg := range fails {
		out.fail(msg)
	}
}

// readSDFile reads one file of a file_sd source, through package safefile:
// a regular file only, opened without waiting (a FIFO put in its place
// would block open until a writer came), of at most the cap of its format,
// and given up when ctx ends.
func readSDFile(ctx context.Context, path string) (*chunk, error) {
	var max int64
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		max = MaxDocumentBytes
	case ".yml", ".yaml":
		max = MaxYAMLDocumentBytes
	default:
		return nil, fmt.Errorf("%s is neither .json nor .yml nor .yaml", path)
	}
	f, err := safefile.Open(ctx, path, max)
	if err != nil {
		return nil, pathless(err)
	}
	defer f.Close()
	over := labels.FromStrings("__meta_filepath", path)
	if max == MaxDocumentBytes {
		c, err := readJSON(f, over)
		return c, pathless(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, pathless(err)
	}
	return readYAML(data, over)
}

// pathless returns the error of a file operation without the path, which
// the caller's message names already.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
