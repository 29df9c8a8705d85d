package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/safefile"
)

// errStopped answers a reload asked for while the daemon stops.
var errStopped = errors.New("server: the daemon is stopping")

// reloader coalesces and paces reloads. Every request is answered by a
// reload that starts after it was made (the file may have changed since the
// one in progress read it); requests made while one waits share it; and two
// reloads start at least Options.ReloadGap apart. One goroutine at a time
// runs the reloads, and only while some are asked for.
type reloader struct {
	d       *Daemon
	mu      sync.Mutex
	next    *reloadRound // the reload waiting to start; requests join it
	running bool         // a goroutine runs reloads
	last    time.Time    // when the last reload started
	closed  bool
}

// reloadRound is one reload and the requests it answers.
type reloadRound struct {
	done chan struct{}
	err  error
}

// request asks for a reload and returns its result.
func (r *reloader) request() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errStopped
	}
	if r.next == nil {
		r.next = &reloadRound{done: make(chan struct{})}
	}
	round := r.next
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.mu.Unlock()
	<-round.done
	return round.err
}

// loop runs the reloads asked for, one at a time, paced, until none waits.
func (r *reloader) loop() {
	for {
		r.mu.Lock()
		round := r.next
		if round == nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		wait := time.Until(r.last.Add(r.d.opt.ReloadGap))
		r.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		r.mu.Lock()
		r.next = nil // later requests wait for the next round
		r.last = time.Now()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			round.err = errStopped
		} else {
			round.err = r.d.reload()
		}
		close(round.done)
	}
}

// stop makes requests fail from now on; a round that waits fails too.
func (r *reloader) stop() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// inputs are the files a configuration was read from, each with a digest
// of the content it was read from, so a reload of unchanged files can be
// told without parsing them.
type inputs struct {
	files []safefile.File
	sums  [][sha256.Size]byte // per file
	ok    bool                // every file has its sum
}

// inputsOf returns the inputs of cfg, just loaded: the digests of what the
// load parsed ([config.Config.Sums]) and, for the files it did not read
// itself (TLS and secret files, which the probers read after it), of their
// content now, before anything reads them. A file edited while it was read
// thus never counts as applied: the next reload finds it changed. A
// configuration that names no file (built in memory) has no inputs and
// never counts as unchanged.
// Files are hashed within their caps (safefile): one larger than its cap is
// not read, it has no sum. ctx bounds the reads.
func inputsOf(ctx context.Context, cfg *config.Config) inputs {
	in := inputs{files: cfg.Files, sums: make([][sha256.Size]byte, len(cfg.Files)), ok: true}
	for i, f := range cfg.Files {
		sum, ok := cfg.Sums[f.Path]
		if !ok {
			var err error
			sum, err = safefile.Sum(ctx, f.Path, f.Max)
			ok = err == nil
		}
		in.sums[i] = sum
		in.ok = in.ok && ok
	}
	return in
}

// unchanged reports whether the files still hold what they held; ctx
// bounds the reads.
func (in *inputs) unchanged(ctx context.Context) bool {
	if !in.ok || len(in.files) == 0 {
		return false
	}
	for i, f := range in.files {
		if sum, err := safefile.Sum(ctx, f.Path, f.Max); err != nil || sum != in.sums[i] {
			return false
		}
	}
	return true
}
