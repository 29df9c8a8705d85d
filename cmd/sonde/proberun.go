package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/server/prober"
)

// probeConcurrency bounds the probes "sonde probe" runs at once.
const probeConcurrency = 64

// oneShotRun probes jobs once each through probe.Workers, one pool per
// prober and timeout. It launches a job only when fewer than
// probeConcurrency run, and every delivery launches the next one.
type oneShotRun struct {
	jobs    []*probeJob
	pools   map[timed]*probe.Workers
	done    []chan struct{} // closed when the job's report is in
	mu      sync.Mutex
	pending []int // ids of the jobs not launched yet, in order
}

// probeAll probes every job that has a prober and calls emit for every job
// in order, as soon as it and those before it are done. When ctx ends first,
// the jobs not done end with an Error outcome.
func probeAll(ctx context.Context, jobs []*probeJob, emit func(*probeJob) error) error {
	r := &oneShotRun{jobs: jobs, pools: map[timed]*probe.Workers{}, done: make([]chan struct{}, len(jobs))}
	for id, j := range jobs {
		r.done[id] = make(chan struct{})
		if j.prober == nil {
			close(r.done[id]) // not resolved: its report says why
			continue
		}
		r.pending = append(r.pending, id)
		if p := j.timed(); r.pools[p] == nil {
			w, err := probe.NewWorkers(probe.WorkersOptions{
				Prober:      p,
				Target:      func(id uint32) probe.Target { return jobs[id].target() },
				Sink:        r,
				Now:         probe.Nanotime,
				Concurrency: probeConcurrency,
				OnReport:    func(id uint32, rep *probe.Report) { jobs[id].rep = *rep },
			})
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			r.pools[p] = w
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range r.pools {
		wg.Go(func() { _ = w.Run(runCtx) }) // fails only when run twice
	}
	for range min(probeConcurrency, len(r.pending)) {
		r.launchNext()
	}
	i := 0
	for ; i < len(jobs); i++ {
		select {
		case <-r.done[i]:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if err := emit(jobs[i]); err != nil {
			stop()
			wg.Wait()
			return err
		}
	}
	stop()
	wg.Wait() // no report arrives after this
	for ; i < len(jobs); i++ {
		select {
		case <-r.done[i]:
		default:
			jobs[i].rep = probe.Report{Result: probe.Result{Outcome: probe.Error}, Err: fmt.Errorf("not probed: %w", ctx.Err())}
		}
		if err := emit(jobs[i]); err != nil {
			return err
		}
	}
	return nil
}

// launchNext launches the next pending job, if any.
func (r *oneShotRun) launchNext() {
	r.mu.Lock()
	if len(r.pending) == 0 {
		r.mu.Unlock()
		return
	}
	id := r.pending[0]
	r.pending = r.pending[1:]
	r.mu.Unlock()
	req := probe.Request{ID: uint32(id), Sent: probe.Nanotime(), Deadline: math.MaxInt64}
	r.pools[r.jobs[id].timed()].Launch(0, []probe.Request{req})
}

// timed bounds every probe of a one-shot prober by a check's timeout, counted
// from the probe's start: the requests of sonde probe carry no deadline, so
// that a wait for a worker can neither shorten a probe nor skip it.
type timed struct {
	p       probe.Reporter
	timeout time.Duration
}

func (j *probeJob) timed() timed { return timed{j.prober, j.check.Timeout} }

func (t timed) Probe(ctx context.Context, tg probe.Target) probe.Result {
	return t.Report(ctx, tg).Result
}

func (t timed) Report(ctx context.Context, tg probe.Target) probe.Report {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.p.Report(ctx, tg)
}

// Deliver marks a job done (its report came through OnReport) and launches
// the next one.
func (r *oneShotRun) Deliver(res probe.Result) {
	close(r.done[res.ID])
	r.launchNext()
}

// target is where the job's probe goes; a host name is the Host header and
// SNI default.
func (j *probeJob) target() probe.Target { return prober.Target(j.entry, j.addr.Addr(), j.addr.Port()) }

// failureText says why a probe failed, with what was expected where the
// prober's error does not say it.
func (j *probeJob) failureText() string {
	r := j.rep
	if r.Outcome.Healthy() {
		return ""
	}
	msg := r.Outcome.String()
	if r.Err != nil {
		msg = r.Err.Error()
	}
	c := j.check
	switch r.Outcome {
	case probe.HTTPStatus:
		msg += " (healthy: " + c.HealthyStatus.String() + ")"
	case probe.BodyMismatch:
		msg += fmt.Sprintf(" (want %q in the first %d bytes)", c.BodyContains, c.MaxBodyBytes)
	case probe.Timeout:
		msg += " (timeout " + c.Timeout.String() + ")"
	}
	return msg
}

// probeLine is the JSON form of one result.
type probeLine struct {
	Target         string        `json:"target"`
	Protocol       string        `json:"protocol"`
	Outcome        probe.Outcome `json:"outcome"`
	Healthy        bool          `json:"healthy"`
	LatencySeconds float64       `json:"latency_seconds"`
	Retransmits    int           `json:"retransmits,omitempty"` // syn:// only: SYNs sent again before the answer or the timeout
	Status         *int          `json:"status,omitempty"`      // HTTP only; 0 when no response arrived
	Address        string        `json:"address,omitempty"`
	Error          string        `json:"error,omitempty"`
	Phases         *phasesJSON   `json:"phases,omitempty"`      // HTTP only
	CertExpiry     *time.Time    `json:"cert_expiry,omitempty"` // HTTPS, when the server sent certificates
}

// phasesJSON are an HTTP probe's phase durations (see [probe.Phases]).
type phasesJSON struct {
	Connect   float64 `json:"connect_seconds"`
	TLS       float64 `json:"tls_seconds"`
	FirstByte float64 `json:"first_byte_seconds"`
	LastByte  float64 `json:"last_byte_seconds"`
}

// probeWriter prints results as text lines or JSON objects.
type probeWriter struct {
	enc *json.Encoder     // with -json
	tw  *tabwriter.Writer // otherwise
}

func newProbeWriter(w io.Writer, asJSON bool) *probeWriter {
	if asJSON {
		return &probeWriter{enc: json.NewEncoder(w)}
	}
	return &probeWriter{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (pw *probeWriter) write(j *probeJob) error {
	if pw.enc != nil {
		return pw.enc.Encode(newProbeLine(j))
	}
	r := j.rep
	status := "-"
	if j.proto != config.TCP && r.Status != 0 {
		status = strconv.Itoa(int(r.Status))
	}
	line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", j.arg, j.proto, r.Outcome, r.Latency.Round(time.Microsecond), status)
	if why := j.failureText(); why != "" {
		line += "\t" + why
	}
	_, err := io.WriteString(pw.tw, line+"\n")
	return err
}

func (pw *probeWriter) flush() error {
	if pw.tw != nil {
		return pw.tw.Flush()
	}
	return nil
}

func newProbeLine(j *probeJob) probeLine {
	r := j.rep
	l := probeLine{
		Target:         j.arg,
		Protocol:       j.proto.String(),
		Outcome:        r.Outcome,
		Healthy:        r.Outcome.Healthy(),
		LatencySeconds: r.Latency.Seconds(),
		Retransmits:    int(r.Retransmits),
		Error:          j.failureText(),
	}
	if j.addr.IsValid() {
		l.Address = j.addr.String()
	}
	if j.proto != config.TCP {
		status := int(r.Status)
		l.Status = &status
		p := r.Phases
		l.Phases = &phasesJSON{Connect: p.Connect.Seconds(), TLS: p.TLS.Seconds(), FirstByte: p.FirstByte.Seconds(), LastByte: p.LastByte.Seconds()}
	}
	if !r.CertExpiry.IsZero() {
		e := r.CertExpiry.UTC()
		l.CertExpiry = &e
	}
	return l
}
