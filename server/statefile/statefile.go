package statefile

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"iter"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// The state file keeps target states across restarts (`sonde run
// -state-file`). Its layout, little-endian:
//
//	magic     8 bytes "SONDEST1"
//	version   uint32 (stateVersion)
//	written   int64, Unix ns
//	strings   uint32 count, then each: uint32 length, bytes
//	checks    uint32 count, then each: uint32 name (string index), 8 bytes of
//	          the SHA-256 of the check's probe key
//	records   uint32 count, then each stateRecordSize bytes: see encodeRecord
//	crc       uint32 CRC-32C of every byte before it
//
// Byte 33 of a record holds recordStreakKnown and recordStreakOK; files
// written before it did have 0 there, and their streaks are of the last
// outcome's kind (see decodeRecord).
//
// A record is one target as one pool lists it. A target is restored when
// its pool and check still exist, the check sends the same probe (same probe
// key) and the address, port and (where it changes the probe) host name
// match. A file that is truncated, corrupt, of another version or not a
// state file at all is reported and ignored, and so is one larger than the
// running targets could need (stateSizeLimit). A save writes the records
// as it reads the targets' states, and a restore matches them as it reads
// them: neither holds a copy of the records.
const (
	Magic           = "SONDEST1" // the first bytes of every state file
	stateVersion    = 1
	stateRecordSize = 64
)

// Flags of a record's byte 33.
const (
	recordStreakKnown = 1 << 0 // recordStreakOK says the streak's kind
	recordStreakOK    = 1 << 1 // the streak is a run of successes
)

var errStateFormat = errors.New("not a sonde state file of this version")

// stateRecord is one target's saved state.
type stateRecord struct {
	pool, check, host uint32 // string, check and (1 + string) indices; host 0 for none
	addr              netip.Addr
	port              uint16
	st                scheduler.TargetStatus // Since and LastProbe in Unix ns
}

// encodeRecord writes r into b (stateRecordSize bytes).
func encodeRecord(b []byte, r *stateRecord) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], r.pool)
	le.PutUint32(b[4:], r.check)
	le.PutUint32(b[8:], r.host)
	le.PutUint16(b[12:], r.port)
	b[14] = byte(r.st.State)
	b[15] = 0
	if r.st.Probed {
		b[15] = 1
	}
	a := r.addr.As16()
	copy(b[16:32], a[:])
	b[32] = byte(r.st.LastOutcome)
	b[33] = recordStreakKnown
	if r.st.StreakOK {
		b[33] |= recordStreakOK
	}
	le.PutUint16(b[34:], uint16(min(r.st.Streak, 1<<16-1)))
	le.PutUint16(b[36:], r.st.LastStatus)
	le.PutUint16(b[38:], 0)
	le.PutUint64(b[40:], uint64(r.st.Since))
	le.PutUint64(b[48:], uint64(r.st.LastProbe))
	le.PutUint32(b[56:], uint32(min(r.st.Latency/time.Microsecond, 1<<32-1)))
	le.PutUint32(b[60:], uint32(min(r.st.Smoothed/time.Microsecond, 1<<32-1)))
}

// decodeRecord reads a record written by encodeRecord.
func decodeRecord(b []byte) (stateRecord, error) {
	le := binary.LittleEndian
	r := stateRecord{pool: le.Uint32(b[0:]), check: le.Uint32(b[4:]), host: le.Uint32(b[8:]), port: le.Uint16(b[12:])}
	r.addr = netip.AddrFrom16([16]byte(b[16:32])).Unmap()
	r.st = scheduler.TargetStatus{
		State:       scheduler.State(b[14]),
		Probed:      b[15]&1 != 0,
		LastOutcome: probe.Outcome(b[32]),
		Streak:      int(le.Uint16(b[34:])),
		LastStatus:  le.Uint16(b[36:]),
		Since:       int64(le.Uint64(b[40:])),
		LastProbe:   int64(le.Uint64(b[48:])),
		Latency:     time.Duration(le.Uint32(b[56:])) * time.Microsecond,
		Smoothed:    time.Duration(le.Uint32(b[60:])) * time.Microsecond,
	}
	if r.st.State > scheduler.Unhealthy || r.st.LastOutcome >= probe.NumOutcomes || b[15]&^1 != 0 || b[33]&^(recordStreakKnown|recordStreakOK) != 0 {
		return r, fmt.Errorf("%w: a record with state %d, outcome %d, streak flags %#x", errStateFormat, b[14], b[32], b[33])
	}
	switch {
	case b[33]&recordStreakKnown != 0:
		r.st.StreakOK = b[33]&recordStreakOK != 0
	case r.st.LastOutcome.Verdict():
		// Written before the streak's kind was: the last outcome is one of the run.
		r.st.StreakOK = r.st.LastOutcome.Healthy()
	default:
		// Of that age and with a last outcome that is no verdict, the run's
		// kind is lost: keep the state, start the run again.
		r.st.Streak = 0
	}
	return r, nil
}

// probeDigest is the first 8 bytes of the SHA-256 of c's probe key.
func probeDigest(c *config.Check) [8]byte {
	h := sha256.Sum256([]byte(c.ProbeKey()))
	return [8]byte(h[:8])
}

// stateTables are a state file's string and check tables, which its records
// index. The strings are kept as one run of bytes and their ends, so that
// the tables take no more memory than the file holds (a string header
// each would take four times what a crafted file of empty strings spends).
type stateTables struct {
	written int64    // Unix ns
	text    []byte   // the strings, one after another
	ends    []uint32 // where each string ends in text
	checks  []stateCheck
}

// nstrings returns the number of strings.
func (t *stateTables) nstrings() int { return len(t.ends) }

// bytes returns string i, which must exist, as the table holds it.
func (t *stateTables) bytes(i uint32) []byte {
	start := uint32(0)
	if i > 0 {
		start = t.ends[i-1]
	}
	return t.text[start:t.ends[i]]
}

// str returns string i, which must exist.
func (t *stateTables) str(i uint32) string { return string(t.bytes(i)) }

// add appends v to the strings and returns its index.
func (t *stateTables) add(v string) uint32 {
	t.text = append(t.text, v...)
	t.ends = append(t.ends, uint32(len(t.text)))
	return uint32(len(t.ends) - 1)
}

type stateCheck struct {
	name   uint32
	digest [8]byte
}

// Source is what a save writes, produced while it is written: the
// strings (nstrings of them) and the records (nrecords) come one at a time,
// so that a save holds no copy of a target's state.
type Source struct {
	written  int64
	nstrings int
	strings  iter.Seq[string]
	checks   []stateCheck
	nrecords int
	records  iter.Seq[*stateRecord]
	// current reports whether the records read are still of the
	// generation they were described with; nil for always. A reload or a
	// discovery update edits the engine in place, and may give a target's
	// id to another target, after it publishes its generation.
	current func() bool
}

// ErrChanged says that the running generation changed while a save
// read its states: the file would pair targets with others' states.
var ErrChanged = errors.New("write state: the configuration changed during the save")

// Snapshot describes a save of the states of cfg's targets, as each pool
// lists them, read from e, the engine running cfg, as the save writes them;
// and of the saved states in pending (nil for none) that still wait for
// their targets. current reports whether e still runs cfg (nil: always); a
// save that finds it changed fails with [ErrChanged]. The string
// table holds the pool and check names, then the host name of every target
// given as one, in id order (hosts holds those ids): a record finds its
// host name's index by its target's rank there.
func Snapshot(cfg *config.Config, e *scheduler.Engine, pending *Pending, current func() bool) *Source {
	clock := e.Clock()
	now, mono := clock.Now().UnixNano(), clock.Nanotime()
	wall := func(ns int64) int64 { return now + (ns - mono) }
	var names []string
	index := map[string]uint32{}
	str := func(v string) uint32 {
		i, ok := index[v]
		if !ok {
			i = uint32(len(names))
			index[v] = i
			names = append(names, v)
		}
		return i
	}
	s := &Source{written: now, current: current}
	for _, c := range cfg.Checks {
		s.checks = append(s.checks, stateCheck{name: str(c.Name), digest: probeDigest(c)})
	}
	pools := make([]uint32, len(cfg.Pools))
	for pi, p := range cfg.Pools {
		pools[pi] = str(p.Name)
		s.nrecords += len(p.Members)
	}
	waiting := pendingRecords(cfg, pending, str)
	s.nrecords += len(waiting)
	hosts := slices.Sorted(maps.Keys(cfg.Hostnames))
	s.nstrings = len(names) + len(hosts)
	s.strings = func(yield func(string) bool) {
		for _, v := range names {
			if !yield(v) {
				return
			}
		}
		for _, id := range hosts {
			if !yield(cfg.Hostnames[id]) {
				return
			}
		}
	}
	s.records = func(yield func(*stateRecord) bool) {
		var r stateRecord
		for pi, p := range cfg.Pools {
			for _, id := range p.Members {
				t := cfg.Targets[id]
				r = stateRecord{pool: pools[pi], check: uint32(p.CheckIndex), addr: t.Addr(), port: t.Port, st: e.Status(id)}
				if rank, ok := slices.BinarySearch(hosts, id); ok {
					r.host = uint32(len(names)+rank) + 1
				}
				r.st.Since = wall(r.st.Since)
				if r.st.LastProbe != 0 {
					r.st.LastProbe = wall(r.st.LastProbe)
				}
				if !yield(&r) {
					return
				}
			}
		}
		for i := range waiting {
			if !yield(&waiting[i]) {
				return
			}
		}
	}
	return s
}

// pendingRecords returns the records of the saved states that still wait
// for their targets (see [Pending]), for a save of cfg: those whose pool
// and check (by name and probe) cfg still has. str numbers their strings.
func pendingRecords(cfg *config.Config, p *Pending, str func(string) uint32) []stateRecord {
	if p == nil || p.n == 0 {
		return nil
	}
	var out []stateRecord
	for _, pool := range cfg.Pools {
		c := cfg.Checks[pool.CheckIndex]
		for k, ps := range p.pools[pool.Name] {
			if ps.check != c.Name || ps.digest != probeDigest(c) {
				continue
			}
			r := stateRecord{pool: str(pool.Name), check: uint32(pool.CheckIndex), addr: k.addr, port: k.port, st: ps.st}
			if k.host != "" {
				r.host = str(k.host) + 1
			}
			out = append(out, r)
		}
	}
	return out
}

// Write writes s to path atomically: to a temporary file in the same
// directory, synced, renamed over path, and the directory synced, so a crash
// leaves the old file or the new one, never a part of either.
func Write(path string, s *Source) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<16)
	le := binary.LittleEndian
	var buf [stateRecordSize]byte
	w.WriteString(Magic)
	w.Write(le.AppendUint32(buf[:0], stateVersion))
	w.Write(le.AppendUint64(buf[:0], uint64(s.written)))
	w.Write(le.AppendUint32(buf[:0], uint32(s.nstrings)))
	n := 0
	for v := range s.strings {
		w.Write(le.AppendUint32(buf[:0], uint32(len(v))))
		w.WriteString(v)
		n++
	}
	if n != s.nstrings {
		return fmt.Errorf("write state: %d strings, announced %d", n, s.nstrings)
	}
	w.Write(le.AppendUint32(buf[:0], uint32(len(s.checks))))
	for _, c := range s.checks {
		w.Write(le.AppendUint32(buf[:0], c.name))
		w.Write(c.digest[:])
	}
	w.Write(le.AppendUint32(buf[:0], uint32(s.nrecords)))
	n = 0
	for r := range s.records {
		encodeRecord(buf[:], r)
		w.Write(buf[:])
		n++
	}
	if n != s.nrecords {
		return fmt.Errorf("write state: %d records, announced %d", n, s.nrecords)
	}
	if s.current != nil && !s.current() {
		return ErrChanged
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if _, err := f.Write(le.AppendUint32(buf[:0], crc.Sum32())); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write state: sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write state: sync directory: %w", err)
	}
	return nil
}

// stateSizeOf returns the size of the state file a save of cfg writes.
func stateSizeOf(cfg *config.Config) int64 {
	n := int64(len(Magic) + 4 + 8 + 4 + 4 + 4 + 4) // header, three counts, crc
	for _, c := range cfg.Checks {
		n += 4 + int64(len(c.Name)) + 12
	}
	for _, p := range cfg.Pools {
		n += 4 + int64(len(p.Name)) + int64(len(p.Members))*stateRecordSize
	}
	for _, h := range cfg.Hostnames {
		n += 4 + int64(len(h))
	}
	return n
}

// stateSizeLimit bounds the state file a daemon running cfg reads: four
// times what a save of cfg writes, and a MiB. A file saved before the fleet
// shrank to less than a quarter is ignored with the rest: the targets could
// not need what it holds, and reading it would cost memory they do not pay.
// A configuration that discovers targets has, at the first load, not found
// them yet: its file may hold records for as many targets as discovery may
// bring (config.DefaultMaxTargets).
func stateSizeLimit(cfg *config.Config) int64 {
	n := 4*stateSizeOf(cfg) + 1<<20
	if cfg.Discovers() {
		n += config.DefaultMaxTargets * stateRecordSize
	}
	return n
}

// stateSink receives what readState reads: the tables, then each record.
// A record is lent for the call only.
type stateSink interface {
	tables(t *stateTables)
	record(r *stateRecord)
}

// readState reads a state file written by [Write], of at most limit
// bytes, into sink: it holds the tables, and hands the records over one at
// a time. It reads the file twice: once to check its checksum, which costs
// no memory, then to decode it, so that a truncated or corrupt file costs
// nothing, and what the tables take is bounded by the file's size. The
// checksum is checked again at the end of the decoding (the file may have
// changed in between): when readState fails, sink must forget what it was
// given. ctx bounds the reads (package safefile: a regular file, opened
// without waiting).
func readState(ctx context.Context, path string, limit int64, sink stateSink) error {
	first, err := checkStateSum(ctx, path, limit)
	if err != nil {
		return err
	}
	f, err := openState(ctx, path, limit)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi := f.Info(); !os.SameFile(first, fi) || fi.Size() != first.Size() || !fi.ModTime().Equal(first.ModTime()) {
		return fmt.Errorf("%w: the file changed while it was read", errStateFormat)
	}
	return decodeState(f, first.Size(), sink)
}

// openState opens the state file, of at most limit bytes.
func openState(ctx context.Context, path string, limit int64) (*safefile.Reader, error) {
	f, err := safefile.Open(ctx, path, limit)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("%w: more than the %d bytes the targets could need", errStateFormat, limit)
	}
	return f, err
}

// checkStateSum reads the state file through and reports whether its
// checksum matches what it holds; it returns the file's description.
func checkStateSum(ctx context.Context, path string, limit int64) (fs.FileInfo, error) {
	f, err := openState(ctx, path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := f.Info().Size()
	if size < int64(len(Magic)) {
		return nil, fmt.Errorf("%w: no %q header", errStateFormat, Magic)
	}
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if _, err := io.CopyN(crc, f, size-4); err != nil {
		return nil, stateReadErr(err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return nil, stateReadErr(err)
	}
	if crc.Sum32() != binary.LittleEndian.Uint32(sum[:]) {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or corrupt)", errStateFormat)
	}
	return f.Info(), nil
}

// stateReadErr is the error of a read of the state file: one that ended
// early says the file is truncated.
func stateReadErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated", errStateFormat)
	}
	return fmt.Errorf("read state: %w", err)
}

// decodeState decodes a state file of size bytes from f into sink.
func decodeState(f io.Reader, size int64, sink stateSink) error {
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	body := bufio.NewReaderSize(io.TeeReader(io.LimitReader(f, max(size-4, 0)), crc), 1<<16)
	r := &stateReader{r: body, left: max(size-4, 0)}
	le := binary.LittleEndian
	truncated := fmt.Errorf("%w: truncated", errStateFormat)
	var head [len(Magic) + 4]byte
	if !r.full(head[:]) || string(head[:len(Magic)]) != Magic {
		return fmt.Errorf("%w: no %q header", errStateFormat, Magic)
	}
	if v := le.Uint32(head[len(Magic):]); v != stateVersion {
		return fmt.Errorf("%w: version %d, want %d", errStateFormat, v, stateVersion)
	}
	t := &stateTables{}
	var w [8]byte
	if !r.full(w[:]) {
		return truncated
	}
	t.written = int64(le.Uint64(w[:]))
	bad := func(what string) error { return fmt.Errorf("%w: bad %s", errStateFormat, what) }
	n, ok := r.u32()
	if !ok || int64(n) > r.left/4 {
		return bad("string table")
	}
	t.ends = make([]uint32, 0, n) // 4 bytes a string, as the file spends at least
	for range n {
		l, ok := r.u32()
		if !ok || int64(l) > r.left || int64(len(t.text))+int64(l) > math.MaxUint32 {
			return bad("string")
		}
		t.text = slices.Grow(t.text, int(l))
		if !r.full(t.text[len(t.text) : len(t.text)+int(l)]) {
			return truncated
		}
		t.text = t.text[:len(t.text)+int(l)]
		t.ends = append(t.ends, uint32(len(t.text)))
	}
	if n, ok = r.u32(); !ok || int64(n) > r.left/12 {
		return bad("check table")
	}
	t.checks = make([]stateCheck, 0, n)
	for range n {
		var c stateCheck
		if c.name, ok = r.u32(); !ok || int(c.name) >= t.nstrings() {
			return bad("check")
		}
		r.full(c.digest[:])
		t.checks = append(t.checks, c)
	}
	if n, ok = r.u32(); !ok || int64(n)*stateRecordSize != r.left {
		return bad("record table")
	}
	sink.tables(t)
	var b [stateRecordSize]byte
	for range n {
		if !r.full(b[:]) {
			return truncated
		}
		rec, err := decodeRecord(b[:])
		if err != nil {
			return err
		}
		if int(rec.pool) >= t.nstrings() || int(rec.check) >= len(t.checks) || int(rec.host) > t.nstrings() {
			return bad("record reference")
		}
		sink.record(&rec)
	}
	var sum [4]byte
	if r.err != nil {
		return stateReadErr(r.err)
	}
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return stateReadErr(err)
	}
	if crc.Sum32() != le.Uint32(sum[:]) {
		return fmt.Errorf("%w: checksum mismatch (truncated or corrupt)", errStateFormat)
	}
	return nil
}

// stateReader reads a state file's body, counting the bytes left.
type stateReader struct {
	r    *bufio.Reader
	left int64
	err  error   // the first read error
	u32b [4]byte // u32's, which would otherwise escape at every call
}

// full fills b; it reports false, and keeps the error, at the end of the
// body or on a read error.
func (r *stateReader) full(b []byte) bool {
	if r.err != nil {
		return false
	}
	n, err := io.ReadFull(r.r, b)
	r.left -= int64(n)
	r.err = err
	return err == nil
}

func (r *stateReader) u32() (uint32, bool) {
	ok := r.full(r.u32b[:])
	return binary.LittleEndian.Uint32(r.u32b[:]), ok
}

// restorer matches the records of a state file with the targets of cfg
// (see [restorer.record]) as they are read, so that a restart holds the
// states it restores, not the file's records.
type restorer struct {
	cfg       *config.Config
	now, mono int64 // the clock's Unix ns and Nanotime, to turn saved times into Nanotimes
	members   []poolMember
	t         *stateTables
	poolOf    []int32 // per string of t: the index of the pool of cfg of that name, or -1
	checkOf   []int   // per check of t: the index of the check of cfg of that name and probe, or -1
	out       []*scheduler.TargetStatus
	n, seen   int // targets restored, records read
	// pending keeps the records of the pools that discover which no target
	// of cfg took: their targets may come later (see [Pending]).
	pending Pending
}

// poolMember is one target of one pool of cfg, for the restorer's index.
type poolMember struct {
	pool int32
	id   uint32
}

// newRestorer returns a restorer for cfg's targets; times are turned from
// Unix ns into clock's Nanotime.
func newRestorer(cfg *config.Config, clock scheduler.Clock) *restorer {
	rs := &restorer{cfg: cfg, now: clock.Now().UnixNano(), mono: clock.Nanotime(), out: make([]*scheduler.TargetStatus, len(cfg.Targets))}
	for pi, p := range cfg.Pools {
		for _, id := range p.Members {
			rs.members = append(rs.members, poolMember{int32(pi), id})
		}
	}
	slices.SortFunc(rs.members, func(a, b poolMember) int {
		ta, tb := cfg.Targets[a.id], cfg.Targets[b.id]
		return cmp.Or(cmp.Compare(a.pool, b.pool), ta.Addr().Compare(tb.Addr()), cmp.Compare(ta.Port, tb.Port), cmp.Compare(a.id, b.id))
	})
	return rs
}

// tables takes a state file's tables: which of its strings name a pool of
// cfg, and which of its checks are a check of cfg sending the same probe.
func (rs *restorer) tables(t *stateTables) {
	rs.t = t
	poolOf := map[string]int32{}
	for pi, p := range rs.cfg.Pools {
		poolOf[p.Name] = int32(pi)
	}
	rs.poolOf = make([]int32, t.nstrings())
	for i := range rs.poolOf {
		pi, ok := poolOf[string(t.bytes(uint32(i)))]
		if !ok {
			pi = -1
		}
		rs.poolOf[i] = pi
	}
	rs.checkOf = make([]int, len(t.checks))
	for i, sc := range t.checks {
		rs.checkOf[i] = -1
		for ci, c := range rs.cfg.Checks {
			if string(t.bytes(sc.name)) == c.Name && sc.digest == probeDigest(c) {
				rs.checkOf[i] = ci
				break
			}
		}
	}
}

// record restores the state of r to the target of cfg that a pool of the
// same name lists with a check of the same name and probe, at the same
// address, port and (where it changes the probe) host name, unless that
// target has a state already: a target that several pools list has one
// state, saved once per pool.
func (rs *restorer) record(r *stateRecord) {
	rs.seen++
	pi := rs.poolOf[r.pool]
	if pi < 0 || rs.checkOf[r.check] != rs.cfg.Pools[pi].CheckIndex {
		return
	}
	key := func(m poolMember) int {
		t := rs.cfg.Targets[m.id]
		return cmp.Or(cmp.Compare(m.pool, pi), t.Addr().Compare(r.addr), cmp.Compare(t.Port, r.port))
	}
	i, _ := slices.BinarySearchFunc(rs.members, 0, func(m poolMember, _ int) int { return key(m) })
	var host []byte // compared without a copy: most records match a target
	if r.host > 0 {
		host = rs.t.bytes(r.host - 1)
	}
	matters := rs.cfg.Checks[rs.cfg.Pools[pi].CheckIndex].HostNameMatters()
	for ; i < len(rs.members) && key(rs.members[i]) == 0; i++ {
		id := rs.members[i].id
		if rs.out[id] != nil || matters && string(host) != rs.cfg.Hostnames[id] {
			continue
		}
		st := r.st
		st.Since = rs.mono - (rs.now - st.Since)
		if st.LastProbe != 0 {
			st.LastProbe = rs.mono - (rs.now - st.LastProbe)
		}
		rs.out[id] = &st
		rs.n++
		return
	}
	if p := rs.cfg.Pools[pi]; len(p.Discovery.Sources) > 0 || len(p.Discovery.Names) > 0 {
		k := pendingKey{addr: r.addr, port: r.port}
		if matters {
			k.host = string(host)
		}
		sc := rs.t.checks[r.check]
		rs.pending.add(p.Name, k, pendingState{check: rs.t.str(sc.name), digest: sc.digest, st: r.st})
	}
}

// Restored is what [Restore] read from a state file.
type Restored struct {
	// States are the states of cfg's targets by id, nil for a target
	// without one.
	States []*scheduler.TargetStatus
	// Targets counts the targets restored, Records the records read.
	Targets, Records int
	// Written is when the file was saved.
	Written time.Time
	// Pending are the saved states of the pools that discover which no
	// target of cfg took: their targets may come, until pendingFor from
	// now.
	Pending Pending
}

// Restore reads the state file at path and matches its records with the
// targets of cfg (see [restorer.record]); saved times are turned into
// clock's Nanotime. It reads no more than cfg's targets could need
// (stateSizeLimit); ctx bounds the reads. A missing file is an error
// matching fs.ErrNotExist.
func Restore(ctx context.Context, path string, cfg *config.Config, clock scheduler.Clock) (*Restored, error) {
	rs := newRestorer(cfg, clock)
	if err := readState(ctx, path, stateSizeLimit(cfg), rs); err != nil {
		return nil, err
	}
	rs.pending.until = clock.Now().Add(pendingFor)
	return &Restored{States: rs.out, Targets: rs.n, Records: rs.seen, Written: time.Unix(0, rs.t.written).UTC(), Pending: rs.pending}, nil
}
