package discovery

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

// TestReadJSON reads SD documents as a stream: what Prometheus accepts is
// accepted, what it refuses is refused.
func TestReadJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, doc string
		want      []string // targets with their labels, or the error's text
	}{
		{"groups", `[{"targets": ["10.0.0.1:80", "10.0.0.2"], "labels": {"zone": "a"}}, {"targets": ["h:1"]}]`,
			[]string{`10.0.0.1:80 {__meta_url="u", zone="a"}`, `10.0.0.2 {__meta_url="u", zone="a"}`, `h:1 {__meta_url="u"}`}},
		{"empty", `[]`, nil},
		{"null", ` null `, nil},
		{"a group without targets", `[{"labels": {"a": "b"}}]`, nil},
		{"utf-8 names", `[{"targets": ["10.0.0.1"], "labels": {"zöne": "a"}}]`, []string{`10.0.0.1 {__meta_url="u", "zöne"="a"}`}},
		{"not a list", `{"targets": []}`, []string{"want a JSON array of target groups"}},
		{"unknown field", `[{"targets": [], "lables": {}}]`, []string{`group 0: json: unknown field "lables"`}},
		{"null group", `[{"targets": ["10.0.0.1"]}, null]`, []string{"group 1 is null"}},
		{"bad label name", `[{"targets": ["10.0.0.1"], "labels": {"": "a"}}]`, []string{`group 0: "" is not a valid label name`}},
		{"number", `[{"targets": [1]}]`, []string{"group 0: json: cannot unmarshal number"}},
		{"cut", `[{"targets": ["10.0.0.1"]}`, []string{"ends before the array of target groups does"}},
		{"trailing", `[] []`, []string{"data after the array of target groups"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch, err := readJSON(strings.NewReader(c.doc), labels.FromStrings("__meta_url", "u"))
			var got []string
			if err != nil {
				got = []string{err.Error()}
				if len(c.want) != 1 || !strings.Contains(got[0], c.want[0]) {
					t.Errorf("error %q, want %q", got[0], c.want)
				}
				return
			}
			got = chunkTargets(ch)
			if !slices.Equal(got, c.want) {
				t.Errorf("targets %q, want %q", got, c.want)
			}
		})
	}
}

// chunkTargets lists a chunk's targets as "address labels", the labels
// the group's, over and the target's.
func chunkTargets(c *chunk) []string {
	var out []string
	c.each(func(gl, tl []label) bool {
		b := labels.NewBuilder(labels.EmptyLabels())
		for _, l := range gl {
			b.Set(l.name, l.value)
		}
		c.over.Range(func(l labels.Label) { b.Set(l.Name, l.Value) })
		for _, l := range tl {
			b.Set(l.name, l.value)
		}
		ls := b.Labels()
		addr := ls.Get(model.AddressLabel)
		out = append(out, addr+" "+labels.NewBuilder(ls).Del(model.AddressLabel).Labels().String())
		return true
	})
	return out
}

// fileSource returns a file_sd source of the patterns, read every minute.
func fileSource(patterns ...string) Source {
	return Source{Key: "file_sd_configs", Config: &FileSD{Files: patterns, RefreshInterval: time.Minute}}
}

// waitStatus waits until the status of pool's first source satisfies ok.
func waitStatus(t *testing.T, run *Runner, ok func(SourceStatus) bool) SourceStatus {
	t.Helper()
	return testenv.Eventually(t, "the source's status", func() (SourceStatus, bool) {
		st := run.Status()
		if len(st) == 0 || len(st[0].Sources) == 0 {
			return SourceStatus{}, false
		}
		return st[0].Sources[0], ok(st[0].Sources[0])
	})
}

// TestFileSD reads JSON and YAML files of a glob, each group with the
// file's path as __meta_filepath, follows their changes, and keeps what a
// file gave while it cannot be read.
func TestFileSD(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.yml")
	write := func(path, text string) {
		t.Helper()
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(a, `[{"targets": ["192.0.2.1:80"], "labels": {"zone": "a"}}]`)
	write(b, "- targets: ['192.0.2.2:80']\n")
	run, _ := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
	run.Update([]Pool{{Name: "p", Sources: []Source{fileSource(filepath.Join(dir, "*.json"), filepath.Join(dir, "*.yml"))},
		Relabel: rules(t, `[{source_labels: [__meta_filepath], regex: ".*/(.*)", target_label: file}]`)}})
	waitFound(t, run, "p", func(f Found) bool {
		return slices.Equal(endpointsOf(f), []string{`192.0.2.1:80 {file="a.json", zone="a"}`, `192.0.2.2:80 {file="b.yml"}`})
	})
	// a.json breaks: it keeps what it gave, and the source fails; b.yml
	// changes and is followed.
	write(a, `[{"targets": ["192.0.2.1:80"]`)
	write(b, "- targets: ['192.0.2.3:80']\n")
	waitFound(t, run, "p", func(f Found) bool {
		return slices.Equal(endpointsOf(f), []string{`192.0.2.1:80 {file="a.json", zone="a"}`, `192.0.2.3:80 {file="b.yml"}`})
	})
	waitStatus(t, run, func(s SourceStatus) bool {
		return s.State == "failing" && strings.Contains(s.LastError, "a.json: group 0: the document ends before")
	})
	// b.yml goes: its targets go.
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	waitFound(t, run, "p", func(f Found) bool {
		return slices.Equal(endpointsOf(f), []string{`192.0.2.1:80 {file="a.json", zone="a"}`})
	})
}

// TestFileSDNotRegular checks that a FIFO matched by a file_sd pattern is
// refused at once — opening it for reading would wait for a writer, and
// Prometheus's file discovery waited there for good — and that a file over
// MaxDocumentBytes is refused from its size, unread; the other files are
// read.
func TestFileSDNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte(`[{"targets": ["192.0.2.1:80"]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "b.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "c.json")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxDocumentBytes+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	bigYAML := filepath.Join(dir, "e.yml")
	if err := os.WriteFile(bigYAML, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bigYAML, MaxYAMLDocumentBytes+1); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	run := NewRunner(Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Debounce: time.Millisecond})
	t.Cleanup(func() { run.Close() })
	run.Update([]Pool{{Name: "p", Sources: []Source{fileSource(filepath.Join(dir, "*.json"), filepath.Join(dir, "*.yml"))}}})
	waitFound(t, run, "p", func(f Found) bool { return f.Len() == 1 })
	waitStatus(t, run, func(s SourceStatus) bool { return s.State == "failing" && s.Failures >= 3 })
	for _, want := range []string{"b.json: not a regular file", "c.json: file too large: 134217729 bytes, at most 134217728 allowed",
		"e.yml: file too large: 8388609 bytes, at most 8388608 allowed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not tell %q:\n%s", want, logs)
		}
	}
	// The source still follows its files: it is not stuck in an open.
	if err := os.WriteFile(filepath.Join(dir, "d.json"), []byte(`[{"targets": ["192.0.2.4:80"]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFound(t, run, "p", func(f Found) bool { return f.Len() == 2 })
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// sdServer is an HTTP SD server on loopback whose answer a test sets.
type sdServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	answer func(w http.ResponseWriter, r *http.Request)
	asked  atomic.Int64
	header http.Header // of the last request
}

func newSDServer(t *testing.T) *sdServer {
	s := &sdServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		answer := s.answer
		s.header = r.Header.Clone()
		s.mu.Unlock()
		s.asked.Add(1)
		answer(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sdServer) set(answer func(w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	s.answer = answer
	s.mu.Unlock()
}

// json answers with a document.
func (s *sdServer) json(doc string) {
	s.set(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, doc)
	})
}

func (s *sdServer) source(every time.Duration) Source {
	return Source{Key: "http_sd_configs", Config: &HTTPSD{URL: s.srv.URL + "/sd", HTTPClientConfig: config.DefaultHTTPClientConfig, RefreshInterval: every}}
}

// TestHTTPSD follows an HTTP SD server as Prometheus does: the refresh
// interval in a header, __meta_url on every group, a failed answer (status,
// content type, document) keeps the targets of the last good one.
func TestHTTPSD(t *testing.T) {
	t.Parallel()
	s := newSDServer(t)
	s.json(`[{"targets": ["192.0.2.1:80"], "labels": {"zone": "a"}}]`)
	run, _ := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
	run.Update([]Pool{{Name: "p", Sources: []Source{s.source(50 * time.Millisecond)},
		Relabel: rules(t, `[{source_labels: [__meta_url], regex: ".*/(sd)", target_label: path}]`)}})
	waitFound(t, run, "p", func(f Found) bool {
		return slices.Equal(endpointsOf(f), []string{`192.0.2.1:80 {path="sd", zone="a"}`})
	})
	s.mu.Lock()
	h := s.header
	s.mu.Unlock()
	if h.Get("X-Prometheus-Refresh-Interval-Seconds") != "0.05" || h.Get("Accept") != "application/json" {
		t.Errorf("request headers %v", h)
	}
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		want   string
	}{
		{"status", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusBadGateway) }, "server returned HTTP status 502 Bad Gateway"},
		{"content type", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>") }, `unsupported content type "text/html; charset=utf-8"`},
		{"document", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `[{"targets": [}]`)
		}, "reading the answer: group 0: invalid character '}'"},
	} {
		before := run.Status()[0].Sources[0].Failures
		s.set(c.answer)
		st := waitStatus(t, run, func(st SourceStatus) bool { return st.Failures > before && st.State == "failing" })
		if !strings.Contains(st.LastError, c.want) {
			t.Errorf("%s: last error %q, want %q", c.name, st.LastError, c.want)
		}
		if f, _ := run.Found(); f["p"].Len() != 1 {
			t.Errorf("%s: %d targets, want the 1 of the last good answer", c.name, f["p"].Len())
		}
	}
}

// TestHTTPSDAnswerCap answers with a gigabyte — one group whose label
// value never ends — and checks that the source reads no more than
// MaxDocumentBytes of it, fails with why, and that reading it allocates a
// bounded multiple of the cap, not of the answer (Prometheus's reader read
// it whole: 1.7 → 5.2 GB of RSS). The refresh interval is a minute, so a
// reader may take that long; the server stops writing when the client
// goes.
func TestHTTPSDAnswerCap(t *testing.T) {
	// Not parallel: it counts what the whole process allocates.
	if raceEnabled {
		t.Skip("measures allocations, which the race detector changes")
	}
	s := newSDServer(t)
	const answer = 1 << 30
	var sent atomic.Int64
	s.set(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"targets": ["192.0.2.2:80"], "labels": {"big": "`)
		block := []byte(strings.Repeat("a", 1<<16))
		for n := 0; n < answer; n += len(block) {
			if _, err := w.Write(block); err != nil {
				return
			}
			sent.Add(int64(len(block)))
		}
		io.WriteString(w, `"}}]`)
	})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	run, _ := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
	run.Update([]Pool{{Name: "p", Sources: []Source{s.source(time.Minute)}}})
	st := waitStatus(t, run, func(st SourceStatus) bool { return st.Failures > 0 })
	runtime.ReadMemStats(&ms)
	allocated = ms.TotalAlloc - allocated
	if !strings.Contains(st.LastError, "larger than the limit of 134217728 bytes") {
		t.Errorf("last error %q, want the answer refused over the limit", st.LastError)
	}
	t.Logf("sent %d MiB before the client went; %d MiB allocated meanwhile", sent.Load()>>20, allocated>>20)
	// The JSON decoder holds a group whole, in a buffer that doubles as it
	// grows: a group as large as the cap costs about four times the cap.
	if allocated > 5*MaxDocumentBytes {
		t.Errorf("reading the answer allocated %d MiB, want at most %d", allocated>>20, 5*MaxDocumentBytes>>20)
	}
}

// slowRules relabels with a regex the configuration accepts (31 states
// alive) over each target's label big: tens of milliseconds a target when
// the label holds tens of kilobytes.
const slowRules = `[{source_labels: [big], regex: "(.*){30}b", target_label: x, replacement: "$1"}]`

// writeBig writes a file_sd file of n targets from 192.0.2.0 on, each with
// a label big of size bytes.
func writeBig(t *testing.T, path string, n, size int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("[")
	big := strings.Repeat("a", size)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"targets": ["192.0.%d.%d:80"], "labels": {"big": %q}}`, 2+i/256, i%256, big)
	}
	b.WriteString("]")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRelabelBudget checks that a source whose relabeling takes longer
// than its budget keeps the targets it gave before, is reported failing
// with why, and counts a refused update.
func TestRelabelBudget(t *testing.T) {
	t.Parallel()
	sd := filepath.Join(t.TempDir(), "sd.json")
	writeBig(t, sd, 1, 10)
	var budget atomic.Int64
	budget.Store(int64(time.Minute))
	run := NewRunner(Options{Logger: testLogger, Debounce: time.Millisecond,
		RelabelBudget: func(int) time.Duration { return time.Duration(budget.Load()) }})
	t.Cleanup(func() { run.Close() })
	run.Update([]Pool{{Name: "p", Sources: []Source{fileSource(sd)}, Relabel: rules(t, slowRules)}})
	waitFound(t, run, "p", func(f Found) bool { return f.Len() == 1 })

	budget.Store(int64(time.Millisecond))
	writeBig(t, sd, 200, 16<<10)
	st := waitStatus(t, run, func(s SourceStatus) bool { return s.Refused == 1 })
	if want := "update refused: relabeling its 200 targets took longer than 1ms"; st.State != "failing" || st.LastError != want {
		t.Errorf("status %+v, want failing with %q", st, want)
	}
	if f, _ := run.Found(); f["p"].Len() != 1 {
		t.Errorf("%d targets, want the 1 given before", f["p"].Len())
	}
}

// TestRelabelSuperseded checks that a relabeling pass is given up when a
// newer update of its source comes: a file of slow targets (most of a
// minute of relabeling) replaced by a small one is followed at once, not
// once the pass over the old file is done, and the status answers
// meanwhile.
func TestRelabelSuperseded(t *testing.T) {
	t.Parallel()
	sd := filepath.Join(t.TempDir(), "sd.json")
	writeBig(t, sd, 1000, 16<<10)
	run, _ := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
	start := time.Now()
	run.Update([]Pool{{Name: "p", Sources: []Source{fileSource(sd)}, Relabel: rules(t, slowRules)}})
	waitStatus(t, run, func(s SourceStatus) bool { return s.Updates == 1 })
	writeBig(t, sd, 1, 10)
	f := waitFound(t, run, "p", func(f Found) bool { return f.Len() == 1 })
	if got := endpointsOf(f); !slices.Equal(got, []string{`192.0.2.0:80 {big="aaaaaaaaaa"}`}) {
		t.Errorf("targets %v, want the small file's", got)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the small file was followed %v after the large one was given: the pass over the large one was not given up", took)
	}
}

// TestRunnerCloseDuringRelabel checks that closing the runner ends a pass
// in progress at once.
func TestRunnerCloseDuringRelabel(t *testing.T) {
	t.Parallel()
	sd := filepath.Join(t.TempDir(), "sd.json")
	writeBig(t, sd, 1000, 16<<10)
	run := NewRunner(Options{Logger: testLogger, Debounce: time.Millisecond})
	start := time.Now()
	run.Update([]Pool{{Name: "p", Sources: []Source{fileSource(sd)}, Relabel: rules(t, slowRules)}})
	waitStatus(t, run, func(s SourceStatus) bool { return s.Updates == 1 })
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the runner closed %v after it was given most of a minute of relabeling", took)
	}
}

// TestSameAnswerAgain checks that an answer given again as it was is not
// relabeled again, and that one whose targets were refused stays refused:
// counted again, its source still failing.
func TestSameAnswerAgain(t *testing.T) {
	t.Parallel()
	s := newSDServer(t)
	s.json(`[{"targets": ["192.0.2.1:80"], "labels": {"b": "2", "a": "1"}}]`)
	run, _ := newTestRunner(t, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
	run.Update([]Pool{{Name: "p", Sources: []Source{s.source(20 * time.Millisecond)}}})
	waitFound(t, run, "p", func(f Found) bool { return f.Len() == 1 })
	run.mu.Lock()
	src := run.pools["p"].sources[0]
	run.mu.Unlock()
	version := src.version.Load()
	asked := s.asked.Load()
	waitStatus(t, run, func(st SourceStatus) bool { return s.asked.Load() > asked+3 && st.Updates > 3 })
	if v := src.version.Load(); v != version {
		t.Errorf("the same answer, given again, changed the source's content: version %d, then %d", version, v)
	}

	s.json(`[{"targets": ["not an address"]}]`)
	waitStatus(t, run, func(st SourceStatus) bool { return st.Refused >= 1 })
	// Each poll counts as an update, and the runner refuses the answer
	// again only after its debounce: in between, the source that gives
	// the refused answer again is failing all the same.
	refused := waitStatus(t, run, func(st SourceStatus) bool {
		if st.State != "failing" {
			t.Fatalf("status %+v: the refused answer given again shows as %s", st, st.State)
		}
		return st.Refused >= 3
	})
	if !strings.HasPrefix(refused.LastError, "update refused: 1 of the 1 targets it gave are invalid") || refused.Targets != 1 {
		t.Errorf("status %+v: want the refusal as last error and the one target kept", refused)
	}
}
