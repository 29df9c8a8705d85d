package statefile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

const stateConfig = `
checks:
  web: {protocol: http, path: /a, interval: 1s, timeout: 1s, rise: 2, fall: 3}
  named: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: one, check: web, targets: ["192.0.2.1:80", "192.0.2.2:80"]}
  - {name: two, check: web, targets: ["192.0.2.2:80"]}
  - {name: three, check: named, targets: ["192.0.2.3:80"]}
`

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// bigPoolConfig is a pool of 2^(32-bits) disabled targets, and one more in
// pool small.
func bigPoolConfig(bits int) string {
	return fmt.Sprintf(`
checks:
  web: {protocol: tcp, tcp_mode: connect, port: 9, interval: 60s}
pools:
  - {name: big, check: web, targets: ["198.18.0.0/%d"], disabled: ["198.18.0.0/%d"]}
  - {name: small, check: web, targets: ["127.0.0.1"], disabled: ["127.0.0.1"]}
`, bits, bits)
}

// idleEngine returns an engine of n targets of one check whose probes
// never run (a simulated clock that nobody advances).
func idleEngine(t *testing.T, n int) *scheduler.Engine {
	t.Helper()
	specs := make([]scheduler.TargetSpec, n)
	for i := range specs {
		specs[i] = scheduler.TargetSpec{Leader: uint32(i)}
	}
	timing := scheduler.Timing{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	e, err := scheduler.New([]scheduler.Check{{Timing: timing, Launcher: idleLauncher{}}}, specs, scheduler.Options{Shards: 1, Clock: scheduler.NewSimClock(time.Unix(1e9, 0))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// idleLauncher launches nothing.
type idleLauncher struct{}

func (idleLauncher) Launch(int, []probe.Request) {}

// stateSnapshot is a whole state file, as tests build it and read it back.
type stateSnapshot struct {
	stateTables
	records []stateRecord
}

// source returns a save of s.
func (s *stateSnapshot) source() *Source {
	strs := func(yield func(string) bool) {
		for i := range s.nstrings() {
			if !yield(s.str(uint32(i))) {
				return
			}
		}
	}
	return &Source{written: s.written, nstrings: s.nstrings(), strings: strs, checks: s.checks,
		nrecords: len(s.records), records: func(yield func(*stateRecord) bool) {
			for i := range s.records {
				if !yield(&s.records[i]) {
					return
				}
			}
		}}
}

func (s *stateSnapshot) tables(t *stateTables) { s.stateTables = *t }
func (s *stateSnapshot) record(r *stateRecord) { s.records = append(s.records, *r) }

// readSnapshot reads the state file at path whole.
func readSnapshot(path string) (*stateSnapshot, error) {
	s := &stateSnapshot{}
	if err := readState(context.Background(), path, 1<<30, s); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreStates restores the states of s to cfg's targets.
func restoreStates(s *stateSnapshot, cfg *config.Config, clock scheduler.Clock) ([]*scheduler.TargetStatus, int) {
	rs := newRestorer(cfg, clock)
	rs.tables(&s.stateTables)
	for i := range s.records {
		rs.record(&s.records[i])
	}
	return rs.out, rs.n
}

// savedSnapshot is a snapshot of stateConfig's targets with states by id.
func savedSnapshot(t *testing.T, cfg *config.Config, host string) *stateSnapshot {
	t.Helper()
	if host != "" {
		cfg.Hostnames = map[uint32]string{2: host}
	}
	s := &stateSnapshot{stateTables: stateTables{written: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()}}
	index := map[string]uint32{}
	str := func(v string) uint32 {
		if i, ok := index[v]; ok {
			return i
		}
		index[v] = s.add(v)
		return index[v]
	}
	for _, c := range cfg.Checks {
		s.checks = append(s.checks, stateCheck{name: str(c.Name), digest: probeDigest(c)})
	}
	for _, p := range cfg.Pools {
		for _, id := range p.Members {
			r := stateRecord{pool: str(p.Name), check: uint32(p.CheckIndex), addr: cfg.Targets[id].Addr(), port: cfg.Targets[id].Port,
				st: scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.Success, Streak: 7 + int(id), StreakOK: true,
					Since: s.written - int64(time.Hour), LastProbe: s.written - int64(time.Second), Latency: 3 * time.Millisecond, Smoothed: 2 * time.Millisecond}}
			if name, ok := cfg.Hostnames[id]; ok {
				r.host = str(name) + 1
			}
			s.records = append(s.records, r)
		}
	}
	return s
}

// TestStateFileRoundTrip writes a state file and reads it back.
func TestStateFileRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	want := savedSnapshot(t, parse(t, stateConfig), "www.example")
	if err := Write(path, want.source()); err != nil {
		t.Fatal(err)
	}
	got, err := readSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(stateSnapshot{}, stateTables{}, stateCheck{}, stateRecord{}), cmp.Comparer(func(a, b interface{ String() string }) bool { return a.String() == b.String() })); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
	if left, _ := filepath.Glob(path + ".tmp*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// A save whose generation was replaced while it read the states
	// leaves the file as it was, and no temporary file.
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raced := savedSnapshot(t, parse(t, stateConfig), "other.example").source()
	raced.current = func() bool { return false }
	if err := Write(path, raced); !errors.Is(err, ErrChanged) {
		t.Errorf("save overtaken by an update: %v, want ErrChanged", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Error("an overtaken save changed the file")
	}
	if left, _ := filepath.Glob(path + ".tmp*"); len(left) != 0 {
		t.Errorf("temporary files left by the overtaken save: %v", left)
	}
}

// TestStateSaveStreams saves the states of 131,073 targets, a hundred of
// them given as host names: the save writes each record as it reads it, so
// it allocates a small part of what a copy of the records would take (13
// MB); the file has the size the read limit counts on, and reads back
// whole. A daemon of a config an eighth of that size refuses the file
// without reading it; one of half that size reads it.
func TestStateSaveStreams(t *testing.T) {
	cfg := parse(t, bigPoolConfig(15))
	cfg.Hostnames = map[uint32]string{}
	for id := range uint32(100) {
		cfg.Hostnames[id*1000] = fmt.Sprintf("h%d.example", id)
	}
	e := idleEngine(t, len(cfg.Targets))
	path := filepath.Join(t.TempDir(), "state")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := Write(path, Snapshot(cfg, e, nil, nil)); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("a save of %d targets allocated %d bytes, want at most 1 MiB", len(cfg.Targets), n)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != stateSizeOf(cfg) {
		t.Errorf("state file of %d bytes, stateSizeOf says %d", fi.Size(), stateSizeOf(cfg))
	}
	got, err := readSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.records) != len(cfg.Targets) {
		t.Fatalf("%d records read back, want %d", len(got.records), len(cfg.Targets))
	}
	hosts := map[uint32]string{}
	for id, r := range got.records {
		if r.host > 0 {
			hosts[uint32(id)] = got.str(r.host - 1)
		}
	}
	if diff := cmp.Diff(cfg.Hostnames, hosts); diff != "" {
		t.Errorf("host names read back (-want +got):\n%s", diff)
	}
	if out, n := restoreStates(got, cfg, e.Clock()); n != len(cfg.Targets) || out[len(out)-1] == nil {
		t.Errorf("%d targets restored, want all %d", n, len(cfg.Targets))
	}

	small := parse(t, bigPoolConfig(18))
	if limit := stateSizeLimit(small); limit >= fi.Size() {
		t.Fatalf("limit %d for an eighth of the targets, want less than the file's %d bytes", limit, fi.Size())
	}
	if err := readState(t.Context(), path, stateSizeLimit(small), newRestorer(small, e.Clock())); !errors.Is(err, errStateFormat) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("reading a file beyond the limit: %v, want errStateFormat: more than the targets could need", err)
	}
	if err := readState(t.Context(), path, stateSizeLimit(parse(t, bigPoolConfig(16))), &stateSnapshot{}); err != nil {
		t.Errorf("reading a file for twice the targets: %v, want it read", err)
	}
	// A configuration that discovers its targets has found none at its
	// first load: the file of the fleet it found before is still read.
	disc := parse(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /}
pools:
  - {name: web, check: web, file_sd_configs: [{files: [%q]}]}
`, filepath.Join(t.TempDir(), "*.json")))
	if err := readState(t.Context(), path, stateSizeLimit(disc), newRestorer(disc, e.Clock())); err != nil {
		t.Errorf("reading the file for a configuration that discovers: %v, want it read", err)
	}
}

// TestStateFileRejects checks that a truncated, corrupt, foreign or newer
// file is an error naming the problem, never a panic or a wrong state.
func TestStateFileRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := Write(good, savedSnapshot(t, parse(t, stateConfig), "").source()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flip := bytes.Clone(data)
	flip[len(flip)/2] ^= 0x40
	newer := bytes.Clone(data)
	newer[len(Magic)] = 9
	for name, bad := range map[string][]byte{
		"empty":     {},
		"truncated": data[:len(data)-10],
		"half":      data[:len(data)/2],
		"corrupt":   flip,
		"foreign":   []byte("# sonde.yaml\nchecks: {}\n"),
		"newer":     newer,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := readSnapshot(path); !errors.Is(err, errStateFormat) {
				t.Errorf("readState = %v, want errStateFormat", err)
			}
		})
	}
}

// TestStateRecordStreak checks that a record keeps its streak's kind, even
// when the last outcome is a local error, which is no part of the run, and
// that a record written before the kind was kept (byte 33 zero) takes it
// from its last outcome, or loses its streak when that is no verdict.
func TestStateRecordStreak(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		st   scheduler.TargetStatus
		old  bool // written with byte 33 zero
		want scheduler.TargetStatus
	}{
		{"successes, then a local error", scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.LocalError, Streak: 10, StreakOK: true}, false,
			scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.LocalError, Streak: 10, StreakOK: true}},
		{"failures, then a local error", scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.LocalError, Streak: 2}, false,
			scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.LocalError, Streak: 2}},
		{"old file, successes", scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.Success, Streak: 4}, true,
			scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.Success, Streak: 4, StreakOK: true}},
		{"old file, failures", scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.Timeout, Streak: 2, StreakOK: true}, true,
			scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.Timeout, Streak: 2}},
		{"old file, a local error", scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.LocalError, Streak: 10, StreakOK: true}, true,
			scheduler.TargetStatus{State: scheduler.Healthy, Probed: true, LastOutcome: probe.LocalError}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b [stateRecordSize]byte
			encodeRecord(b[:], &stateRecord{st: tt.st})
			if tt.old {
				b[33] = 0
			}
			got, err := decodeRecord(b[:])
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.st); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
	var b [stateRecordSize]byte
	encodeRecord(b[:], &stateRecord{})
	b[33] = 0x80
	if _, err := decodeRecord(b[:]); !errors.Is(err, errStateFormat) {
		t.Errorf("a record with unknown streak flags: %v, want errStateFormat", err)
	}
}

// TestRestoreStates checks which targets get their saved state: the ones a
// pool of the same name lists with the same check and probe at the same
// address, port and (where it changes the probe) host name.
func TestRestoreStates(t *testing.T) {
	t.Parallel()
	saved := savedSnapshot(t, parse(t, stateConfig), "www.example")
	clock := scheduler.NewSimClock(time.Date(2026, 1, 2, 3, 5, 5, 0, time.UTC)) // a minute after the save
	clock.Set(int64(time.Hour))
	for _, tt := range []struct {
		name  string
		yaml  string
		hosts map[uint32]string
		want  []bool // per target id, restored
	}{
		{"same", stateConfig, map[uint32]string{2: "www.example"}, []bool{true, true, true}},
		{"probe changed", edited(stateConfig, "path: /a", "path: /b"), map[uint32]string{2: "www.example"}, []bool{false, false, true}},
		{"timing changed", edited(stateConfig, "rise: 2", "rise: 5"), map[uint32]string{2: "www.example"}, []bool{true, true, true}},
		{"host changed", stateConfig, map[uint32]string{2: "other.example"}, []bool{true, true, false}},
		{"pool renamed", edited(stateConfig, "name: one", "name: uno"), map[uint32]string{2: "www.example"}, []bool{false, true, true}},
		{"port changed", edited(stateConfig, "192.0.2.1:80", "192.0.2.1:81"), map[uint32]string{2: "www.example"}, []bool{false, true, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parse(t, tt.yaml)
			cfg.Hostnames = tt.hosts
			got, n := restoreStates(saved, cfg, clock)
			restored := make([]bool, len(got))
			count := 0
			for id, st := range got {
				restored[id] = st != nil
				if st != nil {
					count++
					if st.Streak != 7+id || st.State != scheduler.Healthy || st.Smoothed != 2*time.Millisecond {
						t.Errorf("target %d restored as %+v", id, st)
					}
					if since := scheduler.WallTime(clock, st.Since); !since.Equal(time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC)) {
						t.Errorf("target %d since %v, want an hour before the save", id, since)
					}
				}
			}
			if diff := cmp.Diff(tt.want, restored); diff != "" || n != count {
				t.Errorf("restored (-want +got):\n%s (count %d)", diff, n)
			}
		})
	}
}

// edited returns s with the first old replaced by new.
func edited(s, old, new string) string { return strings.Replace(s, old, new, 1) }

// craftedState writes a state file of size bytes that claims as many
// strings as its size allows, all empty, with a checksum that holds or not.
func craftedState(t *testing.T, size int, validSum bool) string {
	t.Helper()
	le := binary.LittleEndian
	b := make([]byte, 0, size)
	b = append(b, Magic...)
	b = le.AppendUint32(b, stateVersion)
	b = le.AppendUint64(b, 0)
	body := size - len(b) - 4 - 4 // after the count, before the checksum
	b = le.AppendUint32(b, uint32(body/4))
	b = append(b, make([]byte, body)...)
	sum := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	if !validSum {
		sum++
	}
	b = le.AppendUint32(b, sum)
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStateFileCraftedCounts: a state file whose counts claim more than it
// could hold costs no memory before its checksum is checked, and no more
// than its size when the checksum holds. A file of 4 MiB claiming a
// million strings used to take 16 MiB for them before anything checked
// it (2.66 GB for 512 MB).
func TestStateFileCraftedCounts(t *testing.T) {
	const size = 4 << 20
	for _, c := range []struct {
		name     string
		validSum bool
		most     uint64 // bytes readState may allocate
	}{
		{"bad checksum", false, 512 << 10},
		{"checksum holds", true, size + 512<<10},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := craftedState(t, size, c.validSum)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := readState(t.Context(), path, 1<<30, &stateSnapshot{})
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errStateFormat) {
				t.Fatalf("readState = %v, want errStateFormat", err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > c.most {
				t.Errorf("reading a crafted file of %d bytes allocated %d bytes, want at most %d", size, n, c.most)
			}
		})
	}
}
