package server

import (
	"crypto/sha256"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/config"
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

// inputs are the files a configuration was read from, with a digest of
// their contents, so a reload of unchanged files can be told without
// parsing them.
type inputs struct {
	files  []string
	digest [sha256.Size]byte
	ok     bool // every file was read
}

// readInputs reads files and digests them. A configuration that names no
// file (built in memory) has no inputs and never counts as unchanged.
func readInputs(files []string) inputs {
	in := inputs{files: files}
	in.digest, in.ok = digest(files)
	return in
}

// unchanged reports whether the files still hold what they held.
func (in *inputs) unchanged() bool {
	if !in.ok || len(in.files) == 0 {
		return false
	}
	d, ok := digest(in.files)
	return ok && d == in.digest
}

// digest hashes the names and contents of files; it reports false when one
// cannot be read or is not a regular file (opened without waiting, as a
// load opens it: a FIFO put in a file's place must not hang a reload).
func digest(files []string) ([sha256.Size]byte, bool) {
	h := sha256.New()
	for _, name := range files {
		f, err := config.OpenRegular(name)
		if err != nil {
			return [sha256.Size]byte{}, false
		}
		_, err = io.WriteString(h, name+"\x00")
		if err == nil {
			_, err = io.Copy(h, f)
		}
		f.Close()
		if err != nil {
			return [sha256.Size]byte{}, false
		}
		h.Write([]byte{0})
	}
	return [sha256.Size]byte(h.Sum(nil)), true
}
