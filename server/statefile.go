package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// DefaultStateInterval is the time between two saves of the state file.
const DefaultStateInterval = 15 * time.Second

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
// state file at all is reported and ignored.
const (
	stateMagic      = "SONDEST1"
	stateVersion    = 1
	stateRecordSize = 64
	maxStateStrings = 1 << 20
	maxStateRecords = 1 << 28
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

// stateSnapshot is what a save writes: string and check tables and records.
type stateSnapshot struct {
	written int64
	strings []string
	checks  []stateCheck
	records []stateRecord
}

type stateCheck struct {
	name   uint32
	digest [8]byte
}

// snapshot reads the states of g's targets, as each pool lists them.
func snapshot(g *generation) *stateSnapshot {
	clock := g.engine.Clock()
	now, mono := clock.Now().UnixNano(), clock.Nanotime()
	wall := func(ns int64) int64 { return now + (ns - mono) }
	s := &stateSnapshot{written: now}
	index := map[string]uint32{}
	str := func(v string) uint32 {
		i, ok := index[v]
		if !ok {
			i = uint32(len(s.strings))
			index[v] = i
			s.strings = append(s.strings, v)
		}
		return i
	}
	for _, c := range g.cfg.Checks {
		s.checks = append(s.checks, stateCheck{name: str(c.Name), digest: probeDigest(c)})
	}
	for pi, p := range g.cfg.Pools {
		pool := str(p.Name)
		for _, id := range p.Members {
			t := g.cfg.Targets[id]
			r := stateRecord{pool: pool, check: uint32(p.CheckIndex), addr: t.Addr, port: t.Port, st: g.engine.Status(id)}
			if name, ok := g.cfg.Hostnames[id]; ok {
				r.host = str(name) + 1
			}
			r.st.Since = wall(r.st.Since)
			if r.st.LastProbe != 0 {
				r.st.LastProbe = wall(r.st.LastProbe)
			}
			_ = pi
			s.records = append(s.records, r)
		}
	}
	return s
}

// writeState writes s to path atomically: to a temporary file in the same
// directory, synced, renamed over path, and the directory synced, so a crash
// leaves the old file or the new one, never a part of either.
func writeState(path string, s *stateSnapshot) (err error) {
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
	w.WriteString(stateMagic)
	w.Write(le.AppendUint32(buf[:0], stateVersion))
	w.Write(le.AppendUint64(buf[:0], uint64(s.written)))
	w.Write(le.AppendUint32(buf[:0], uint32(len(s.strings))))
	for _, v := range s.strings {
		w.Write(le.AppendUint32(buf[:0], uint32(len(v))))
		w.WriteString(v)
	}
	w.Write(le.AppendUint32(buf[:0], uint32(len(s.checks))))
	for _, c := range s.checks {
		w.Write(le.AppendUint32(buf[:0], c.name))
		w.Write(c.digest[:])
	}
	w.Write(le.AppendUint32(buf[:0], uint32(len(s.records))))
	for i := range s.records {
		encodeRecord(buf[:], &s.records[i])
		w.Write(buf[:])
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

// readState reads a state file written by writeState.
func readState(path string) (*stateSnapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < len(stateMagic)+4 || string(data[:len(stateMagic)]) != stateMagic {
		return nil, fmt.Errorf("%w: no %q header", errStateFormat, stateMagic)
	}
	le := binary.LittleEndian
	if v := le.Uint32(data[len(stateMagic):]); v != stateVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errStateFormat, v, stateVersion)
	}
	if len(data) < len(stateMagic)+16 {
		return nil, fmt.Errorf("%w: truncated", errStateFormat)
	}
	body, sum := data[:len(data)-4], le.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or corrupt)", errStateFormat)
	}
	r := bytes.NewReader(body[len(stateMagic)+4:])
	u32 := func() (uint32, error) {
		var b [4]byte
		_, err := io.ReadFull(r, b[:])
		return le.Uint32(b[:]), err
	}
	s := &stateSnapshot{}
	var w [8]byte
	if _, err := io.ReadFull(r, w[:]); err != nil {
		return nil, fmt.Errorf("%w: truncated", errStateFormat)
	}
	s.written = int64(le.Uint64(w[:]))
	bad := func(what string) error { return fmt.Errorf("%w: bad %s", errStateFormat, what) }
	n, err := u32()
	if err != nil || n > maxStateStrings {
		return nil, bad("string table")
	}
	for range n {
		l, err := u32()
		if err != nil || int(l) > r.Len() {
			return nil, bad("string")
		}
		b := make([]byte, l)
		io.ReadFull(r, b)
		s.strings = append(s.strings, string(b))
	}
	if n, err = u32(); err != nil || int(n) > r.Len()/12 {
		return nil, bad("check table")
	}
	for range n {
		var c stateCheck
		if c.name, err = u32(); err != nil || int(c.name) >= len(s.strings) {
			return nil, bad("check")
		}
		io.ReadFull(r, c.digest[:])
		s.checks = append(s.checks, c)
	}
	if n, err = u32(); err != nil || n > maxStateRecords || int(n)*stateRecordSize != r.Len() {
		return nil, bad("record table")
	}
	s.records = make([]stateRecord, n)
	var b [stateRecordSize]byte
	for i := range s.records {
		io.ReadFull(r, b[:])
		if s.records[i], err = decodeRecord(b[:]); err != nil {
			return nil, err
		}
		rec := &s.records[i]
		if int(rec.pool) >= len(s.strings) || int(rec.check) >= len(s.checks) || int(rec.host) > len(s.strings) {
			return nil, bad("record reference")
		}
	}
	return s, nil
}

// restoreStates returns, per target of cfg (ids as cfg's), the state saved
// in s, or nil: for a target that a pool of the same name lists with a check
// of the same name and probe, at the same address, port and (where it
// changes the probe) host name. Times are turned from Unix ns into clock's
// Nanotime. It returns how many targets it restored.
func restoreStates(s *stateSnapshot, cfg *config.Config, clock scheduler.Clock) ([]*scheduler.TargetStatus, int) {
	now, mono := clock.Now().UnixNano(), clock.Nanotime()
	poolOf := map[string]int{}
	for pi, p := range cfg.Pools {
		poolOf[p.Name] = pi
	}
	type keyed struct {
		pool int
		rec  *stateRecord
	}
	var recs []keyed
	for i := range s.records {
		r := &s.records[i]
		pi, ok := poolOf[s.strings[r.pool]]
		if !ok {
			continue
		}
		c := cfg.Checks[cfg.Pools[pi].CheckIndex]
		sc := s.checks[r.check]
		if s.strings[sc.name] != c.Name || sc.digest != probeDigest(c) {
			continue
		}
		recs = append(recs, keyed{pi, r})
	}
	cmpRec := func(pool int, addr netip.Addr, port uint16, k keyed) int {
		return cmp.Or(cmp.Compare(pool, k.pool), addr.Compare(k.rec.addr), cmp.Compare(port, k.rec.port))
	}
	slices.SortFunc(recs, func(a, b keyed) int { return cmpRec(a.pool, a.rec.addr, a.rec.port, b) })
	out := make([]*scheduler.TargetStatus, len(cfg.Targets))
	n := 0
	for pi, p := range cfg.Pools {
		matters := cfg.Checks[p.CheckIndex].HostNameMatters()
		for _, id := range p.Members {
			if out[id] != nil {
				continue
			}
			t := cfg.Targets[id]
			i, _ := slices.BinarySearchFunc(recs, t, func(k keyed, t config.Target) int { return -cmpRec(pi, t.Addr, t.Port, k) })
			for ; i < len(recs) && cmpRec(pi, t.Addr, t.Port, recs[i]) == 0; i++ {
				r := recs[i].rec
				host := ""
				if r.host > 0 {
					host = s.strings[r.host-1]
				}
				if matters && host != cfg.Hostnames[id] {
					continue
				}
				st := r.st
				st.Since = mono - (now - st.Since)
				if st.LastProbe != 0 {
					st.LastProbe = mono - (now - st.LastProbe)
				}
				out[id] = &st
				n++
				break
			}
		}
	}
	return out, n
}

// restore reads the state file for the first configuration; a missing file
// is a first start, any other problem is reported and the file ignored.
func (d *Daemon) restore(cfg *config.Config) []*scheduler.TargetStatus {
	if d.opt.StateFile == "" {
		return nil
	}
	s, err := readState(d.opt.StateFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.log.Info("no state file yet; targets start in their initial state", "file", d.opt.StateFile)
		return nil
	case err != nil:
		d.log.Warn("state file ignored; targets start in their initial state", "file", d.opt.StateFile, "err", err)
		return nil
	}
	out, n := restoreStates(s, cfg, d.opt.Clock)
	d.log.Info("states restored", "file", d.opt.StateFile, "targets", n, "saved", time.Unix(0, s.written).UTC().Format(time.RFC3339),
		"saved_records", len(s.records))
	return out
}

// saveState writes the running generation's states to the state file.
func (d *Daemon) saveState() error {
	g := d.cur.Load()
	if g == nil {
		return nil
	}
	return writeState(d.opt.StateFile, snapshot(g))
}

// saveEvery saves the state file every StateInterval until ctx is done. A
// failure is logged once until a save succeeds again.
func (d *Daemon) saveEvery(ctx context.Context) {
	t := time.NewTicker(d.opt.StateInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := d.saveState()
		switch {
		case err != nil && !failing:
			d.log.Warn("saving the state file failed; retrying", "file", d.opt.StateFile, "err", err)
		case err == nil && failing:
			d.log.Info("state file saved again", "file", d.opt.StateFile)
		}
		failing = err != nil
	}
}
