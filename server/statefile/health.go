package statefile

import (
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

// Health is what the daemon knows of its saves of the state file. It is
// safe for concurrent use.
type Health struct {
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

// NewHealth makes the state file's metrics and registers them on reg.
func NewHealth(reg prometheus.Registerer) *Health {
	h := &Health{
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

// Report is what [Health.Record] tells its caller to log.
type Report int

const (
	Quiet        Report = iota // nothing new
	Failed                     // the first failure after a success (or the first save)
	StillFailing               // failing for saveLogEvery more
	Recovered                  // a success after failures
)

// Record takes the result of a save made at now.
func (h *Health) Record(err error, now time.Time) Report {
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
			return Recovered
		}
		return Quiet
	}
	h.saves.WithLabelValues("failure").Inc()
	h.ok.Set(0)
	h.failures++
	if h.failing.IsZero() {
		h.failing, h.logged = now, now
		return Failed
	}
	if now.Sub(h.logged) >= saveLogEvery {
		h.logged = now
		return StillFailing
	}
	return Quiet
}

// Status returns the failure being reported: since when saves fail, how
// many did, the last error and the last success; a zero since while saves
// succeed.
func (h *Health) Status() (since time.Time, failures int, err error, lastOK time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing, h.failures, h.lastErr, h.lastOK
}
