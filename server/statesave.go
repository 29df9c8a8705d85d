package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The state file's saves: every StateInterval and at Stop. A failed save
// (a directory gone or not writable, a full disk) is never silent: it is
// counted and timed in metrics, shown on the status page, logged at its
// start, every saveLogEvery while it lasts and when it ends, and a failed
// save at Stop is Stop's error.

// saveLogEvery is how often a save that keeps failing is logged again.
const saveLogEvery = 10 * time.Minute

// saveHealth is what the daemon knows of its saves of the state file. It is
// safe for concurrent use.
type saveHealth struct {
	saves    *prometheus.CounterVec // result
	ok       prometheus.Gauge
	lastTime prometheus.Gauge

	mu       sync.Mutex
	lastOK   time.Time // the last save that succeeded; zero before one
	failing  time.Time // the first failure since the last success; zero while saves succeed
	lastErr  error     // of the last save, nil when it succeeded
	failures int       // since the last success
	logged   time.Time // when the failure was last logged
}

// newSaveHealth makes the state file's metrics and registers them on reg.
func newSaveHealth(reg prometheus.Registerer) *saveHealth {
	h := &saveHealth{
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_state_saves_total",
			Help: "Saves of the state file (-state-file), by result (success or failure).",
		}, []string{"result"}),
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sonde_state_last_save_successful",
			Help: "1 when the last save of the state file succeeded (or none was due yet), 0 when it failed: a restart would lose the states since the last success.",
		}),
		lastTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sonde_state_last_save_success_timestamp_seconds",
			Help: "Time of the last successful save of the state file; 0 before one.",
		}),
	}
	h.saves.WithLabelValues("success")
	h.saves.WithLabelValues("failure")
	h.ok.Set(1)
	reg.MustRegister(h.saves, h.ok, h.lastTime)
	return h
}

// saveReport is what record tells its caller to log.
type saveReport int

const (
	saveQuiet     saveReport = iota // nothing new
	saveFailed                      // the first failure after a success (or the first save)
	saveStillFail                   // failing for saveLogEvery more
	saveRecovered                   // a success after failures
)

// record takes the result of a save made at now.
func (h *saveHealth) record(err error, now time.Time) saveReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if err == nil {
		h.saves.WithLabelValues("success").Inc()
		h.ok.Set(1)
		h.lastTime.Set(float64(now.Unix()))
		h.lastOK = now
		recovered := !h.failing.IsZero()
		h.failing, h.failures = time.Time{}, 0
		if recovered {
			return saveRecovered
		}
		return saveQuiet
	}
	h.saves.WithLabelValues("failure").Inc()
	h.ok.Set(0)
	h.failures++
	if h.failing.IsZero() {
		h.failing, h.logged = now, now
		return saveFailed
	}
	if now.Sub(h.logged) >= saveLogEvery {
		h.logged = now
		return saveStillFail
	}
	return saveQuiet
}

// status returns the failure being reported: since when saves fail, how
// many did, the last error and the last success; a zero since while saves
// succeed.
func (h *saveHealth) status() (since time.Time, failures int, err error, lastOK time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing, h.failures, h.lastErr, h.lastOK
}

// alert is the status page's line about the saves, "" while they succeed.
func (h *saveHealth) alert(file string, now time.Time) string {
	since, n, err, lastOK := h.status()
	if since.IsZero() {
		return ""
	}
	last := "none has succeeded since sonde started"
	if !lastOK.IsZero() {
		last = "the last success was at " + wallClock(lastOK, now)
	}
	return fmt.Sprintf("State file %s not saved: %s failed since %s, %s; a restart now would lose the states since. Last error: %v.",
		file, count(n, "1 save", "%d saves"), wallClock(since, now), last, err)
}

// saveState writes the running generation's states, and the saved states
// still waiting for discovered targets, to the state file. A save that a
// reload or a discovery update overtook is made again, a few times.
func (d *Daemon) saveState() error {
	var err error
	for range saveTries {
		d.updateMu.Lock()
		s := d.stateToSave()
		d.updateMu.Unlock()
		if s == nil {
			return nil
		}
		if err = writeState(d.opt.StateFile, s); !errors.Is(err, errStateChanged) {
			return err
		}
	}
	return fmt.Errorf("%w, %d times in a row", err, saveTries)
}

// saveTries is how many times saveState tries a save that updates overtake.
const saveTries = 3

// stateToSave describes the save of the running generation, nil before
// one runs. Called with updateMu held.
func (d *Daemon) stateToSave() *stateSource {
	g := d.cur.Load()
	if g == nil {
		return nil
	}
	d.pending.expire(d.opt.Clock.Now())
	s := snapshot(g, &d.pending)
	s.current = func() bool { return d.cur.Load() == g }
	return s
}

// saveEvery saves the state file every StateInterval until ctx is done.
func (d *Daemon) saveEvery(ctx context.Context) {
	t := time.NewTicker(d.opt.StateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.saved(d.saveState())
	}
}

// saved records and reports the result of a save.
func (d *Daemon) saved(err error) {
	switch d.saves.record(err, time.Now()) {
	case saveFailed:
		d.log.Warn("saving the state file failed; retrying every interval", "file", d.opt.StateFile, "err", err)
	case saveStillFail:
		since, n, _, _ := d.saves.status()
		d.log.Warn("saving the state file still fails", "file", d.opt.StateFile, "failures", n,
			"since", since.UTC().Format(time.RFC3339), "err", err)
	case saveRecovered:
		d.log.Info("state file saved again", "file", d.opt.StateFile)
	}
}
