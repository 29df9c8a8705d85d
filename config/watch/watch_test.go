package watch

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/internal/testenv"
)

// named returns paths as files of a configuration's cap.
func named(paths ...string) []safefile.File {
	var out []safefile.File
	for _, p := range paths {
		out = append(out, safefile.File{Path: p, Max: safefile.MaxConfig})
	}
	return out
}

// watched runs a watcher over files with a short debounce. looks receives
// the result of every look at the files.
type watched struct {
	w     *Watcher
	looks chan bool
}

func watch(t *testing.T, files ...string) *watched {
	t.Helper()
	looks := make(chan bool, 1000)
	w, err := New(t.Context(), named(files...), Options{
		Debounce: 200 * time.Millisecond,
		Checked:  func(changed bool) { looks <- changed },
		Error:    func(err error) { t.Errorf("watcher: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return &watched{w: w, looks: looks}
}

// next waits for the next look at the files and returns whether it found a
// change; a change must also be on Changes.
func (x *watched) next(t *testing.T) bool {
	t.Helper()
	var changed bool
	testenv.Eventually(t, "a look at the files", func() (bool, bool) {
		select {
		case changed = <-x.looks:
			return true, true
		default:
			return false, false
		}
	})
	if changed {
		select {
		case <-x.w.Changes():
		default:
			t.Fatal("a look found a change, Changes has none")
		}
	}
	return changed
}

// quiet asserts that no change is pending.
func (x *watched) quiet(t *testing.T) {
	t.Helper()
	select {
	case <-x.w.Changes():
		t.Fatal("a change is reported that should not be")
	default:
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rewrite writes data over the file's first bytes without truncating it:
// events, and content that is data at every moment when it was before.
func rewrite(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func TestWatchEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sonde.yaml")
	write(t, cfg, "a: 1\n")
	x := watch(t, cfg)

	write(t, cfg, "a: 2\n")
	if !x.next(t) {
		t.Fatal("an edit in place is no change")
	}

	// Same bytes again, and a touch: looks that find nothing.
	rewrite(t, cfg, "a: 2\n")
	if x.next(t) {
		t.Fatal("rewriting the same bytes is a change")
	}
	now := time.Now().Add(time.Minute)
	if err := os.Chtimes(cfg, now, now); err != nil {
		t.Fatal(err)
	}
	if x.next(t) {
		t.Fatal("a touch is a change")
	}
	x.quiet(t)

	// An editor's save: a new file renamed over the old one.
	tmp := filepath.Join(dir, ".sonde.yaml.swp")
	write(t, tmp, "a: 3\n")
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	if !x.next(t) {
		t.Fatal("a rename over the file is no change")
	}

	// Deleted, then created again with other content: two changes, or one
	// when both fall in one debounce.
	if err := os.Remove(cfg); err != nil {
		t.Fatal(err)
	}
	if !x.next(t) {
		t.Fatal("deleting the file is no change")
	}
	write(t, cfg, "a: 4\n")
	if !x.next(t) {
		t.Fatal("creating the file again is no change")
	}
}

// TestWatchFIFO puts a FIFO that nobody writes in a watched file's place:
// the watcher reports the change (the file can no longer be read) and goes
// on watching, where reading the FIFO would wait for a writer for ever.
func TestWatchFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sonde.yaml")
	write(t, cfg, "a: 1\n")
	x := watch(t, cfg)
	if err := os.Remove(cfg); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a reader that waits for a writer gets one, and EOF
		if f, err := os.OpenFile(cfg, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	if !x.next(t) {
		t.Fatal("a FIFO in the file's place is no change")
	}
	if err := os.Remove(cfg); err != nil {
		t.Fatal(err)
	}
	write(t, cfg, "a: 2\n")
	if !x.next(t) {
		t.Fatal("the file back after the FIFO is no change")
	}
}

// TestWatchConfigMap updates a directory the way the kubelet updates a
// mounted ConfigMap: the files live in a timestamped directory, "..data"
// links to it and each file name links through "..data"; an update writes
// a new directory and renames a new "..data" link over the old one.
func TestWatchConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := 0
	swap := func(files map[string]string) {
		t.Helper()
		version++
		ts := filepath.Join(dir, "..2026_01_02_03_04_05."+string(rune('0'+version)))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			write(t, filepath.Join(ts, name), data)
		}
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for name := range files {
			link := filepath.Join(dir, name)
			if _, err := os.Lstat(link); err != nil {
				if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
					t.Fatal(err)
				}
			}
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	swap(map[string]string{"sonde.yaml": "v: 1\n", "targets.txt": "198.18.0.1\n"})
	cfg, targets := filepath.Join(dir, "sonde.yaml"), filepath.Join(dir, "targets.txt")
	x := watch(t, cfg, targets)

	swap(map[string]string{"sonde.yaml": "v: 2\n", "targets.txt": "198.18.0.1\n"})
	if !x.next(t) {
		t.Fatal("a ConfigMap update of the config file is no change")
	}
	swap(map[string]string{"sonde.yaml": "v: 2\n", "targets.txt": "198.18.0.2\n"})
	if !x.next(t) {
		t.Fatal("a ConfigMap update of a targets file is no change")
	}
	// The kubelet rewrites unchanged content too (a change of another key,
	// or a resync): no change.
	swap(map[string]string{"sonde.yaml": "v: 2\n", "targets.txt": "198.18.0.2\n"})
	if x.next(t) {
		t.Fatal("a ConfigMap update with the same content is a change")
	}
	x.quiet(t)
}

// TestWatchSetFiles: files added to the set are watched from their content
// at that time; files left out are no longer.
func TestWatchSetFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, a, b := filepath.Join(dir, "sonde.yaml"), filepath.Join(dir, "a.txt"), filepath.Join(t.TempDir(), "b.txt")
	write(t, cfg, "x")
	write(t, a, "a")
	write(t, b, "b")
	x := watch(t, cfg, a)
	x.w.SetFiles(named(cfg, b))
	write(t, cfg, "y") // a look after SetFiles is taken: b is watched now
	if !x.next(t) {
		t.Fatal("config edit is no change")
	}
	write(t, b, "b2")
	if !x.next(t) {
		t.Fatal("an edit of a file added by SetFiles is no change")
	}
	write(t, a, "a2")
	rewrite(t, cfg, "y") // same content: the look this makes must find nothing
	if x.next(t) {
		t.Fatal("an edit of a file left out by SetFiles is a change")
	}
}

// TestWatchDebounce: a burst of writes is looked at once or a few times,
// not once per write.
func TestWatchDebounce(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "sonde.yaml")
	write(t, cfg, "0")
	looks := make(chan bool, 1000)
	w, err := New(t.Context(), named(cfg), Options{Debounce: 300 * time.Millisecond, Checked: func(c bool) { looks <- c }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const writes = 50
	for i := range writes {
		write(t, cfg, string(rune('a'+i%26)))
	}
	testenv.Eventually(t, "a change reported for 50 writes", func() (bool, bool) {
		select {
		case <-w.Changes():
			return true, true
		default:
			return false, false
		}
	})
	// Count the looks until the watcher has been quiet for two seconds:
	// time must pass to show that no further look comes.
	n := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		select {
		case <-looks:
			n++
			continue
		case <-time.After(2 * time.Second):
		}
		break
	}
	if n < 1 || n > writes/5 {
		t.Fatalf("%d looks for a burst of %d writes, want 1 to %d", n, writes, writes/5)
	}
}

func TestPathPoints(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "..v1"), 0o755))
	write(t, filepath.Join(dir, "..v1", "sonde.yaml"), "x")
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/sonde.yaml", filepath.Join(dir, "sonde.yaml")))
	must(os.Mkdir(filepath.Join(dir, "etc"), 0o755))
	must(os.Symlink(filepath.Join(dir, "sonde.yaml"), filepath.Join(dir, "etc", "abs.yaml")))
	write(t, filepath.Join(dir, "plain.yaml"), "x")

	tests := []struct {
		path string
		want []point
	}{
		{filepath.Join(dir, "plain.yaml"), []point{{dir, "plain.yaml"}}},
		{filepath.Join(dir, "sonde.yaml"), []point{{dir, "sonde.yaml"}, {dir, "..data"}, {filepath.Join(dir, "..v1"), "sonde.yaml"}}},
		{filepath.Join(dir, "etc", "abs.yaml"), []point{{filepath.Join(dir, "etc"), "abs.yaml"}, {dir, "sonde.yaml"}, {dir, "..data"}, {filepath.Join(dir, "..v1"), "sonde.yaml"}}},
		{filepath.Join(dir, "missing", "sonde.yaml"), []point{{dir, "missing"}}},
		{filepath.Join(dir, "etc", "..", "plain.yaml"), []point{{dir, "plain.yaml"}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, pathPoints(tt.path), cmp.AllowUnexported(point{})); diff != "" {
			t.Errorf("pathPoints(%s) (-want +got):\n%s", tt.path, diff)
		}
	}
}

// TestWatchDirectoryMoved moves the directory of a watched file away: only
// that directory is watched, and its own move is a change (the file is
// gone), as is a new directory put in its place.
func TestWatchDirectoryMoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := filepath.Join(dir, "conf")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(sub, "sonde.yaml")
	write(t, cfg, "a: 1\n")
	x := watch(t, cfg)

	if err := os.Rename(sub, filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	if !x.next(t) {
		t.Fatal("moving the file's directory away is no change")
	}
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, cfg, "a: 2\n")
	if !x.next(t) {
		t.Fatal("a new directory with the file is no change")
	}
}
