package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/server/statefile"
	"github.com/sondeprobe/sonde/server/ui"
)

// The daemon's side of the state file (package statefile): it restores the
// states at the first load and saves them every StateInterval and at Stop.

// DefaultStateInterval is the time between two saves of the state file.
const DefaultStateInterval = 15 * time.Second

// ErrStateFile is wrapped by the errors of a state file the daemon must not
// use: one that is not sonde's (a save would overwrite it), one another
// sonde holds, one whose lock cannot be made. Start fails with it; the
// caller should treat it as bad usage.
var ErrStateFile = statefile.ErrUnusable

// saveAlert is the status page's line about the saves, "" while they succeed.
func saveAlert(h *statefile.Health, file string, now time.Time) string {
	since, n, err, lastOK := h.Status()
	if since.IsZero() {
		return ""
	}
	last := "none has succeeded since sonde started"
	if !lastOK.IsZero() {
		last = "the last success was at " + ui.WallClock(lastOK, now)
	}
	return fmt.Sprintf("State file %s not saved: %s failed since %s, %s; a restart now would lose the states since. Last error: %v.",
		file, ui.Count(n, "1 save", "%d saves"), ui.WallClock(since, now), last, err)
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
		if err = statefile.Write(d.opt.StateFile, s); !errors.Is(err, statefile.ErrChanged) {
			return err
		}
	}
	return fmt.Errorf("%w, %d times in a row", err, saveTries)
}

// saveTries is how many times saveState tries a save that updates overtake.
const saveTries = 3

// stateToSave describes the save of the running generation, nil before
// one runs. Called with updateMu held.
func (d *Daemon) stateToSave() *statefile.Source {
	g := d.cur.Load()
	if g == nil {
		return nil
	}
	d.pending.Expire(d.opt.Clock.Now())
	return statefile.Snapshot(g.cfg, g.engine, &d.pending, func() bool { return d.cur.Load() == g })
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
	switch d.saves.Record(err, time.Now()) {
	case statefile.Failed:
		d.log.Warn("saving the state file failed; retrying every interval", "file", d.opt.StateFile, "err", err)
	case statefile.StillFailing:
		since, n, _, _ := d.saves.Status()
		d.log.Warn("saving the state file still fails", "file", d.opt.StateFile, "failures", n,
			"since", since.UTC().Format(time.RFC3339), "err", err)
	case statefile.Recovered:
		d.log.Info("state file saved again", "file", d.opt.StateFile)
	}
}

// restore reads the state file for the first configuration; a missing file
// is a first start, any other problem is reported and the file ignored.
func (d *Daemon) restore(cfg *config.Config) []*scheduler.TargetStatus {
	if d.opt.StateFile == "" {
		return nil
	}
	rs, err := statefile.Restore(d.life, d.opt.StateFile, cfg, d.opt.Clock)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.log.Info("no state file yet; targets start in their initial state", "file", d.opt.StateFile)
		return nil
	case err != nil:
		d.log.Warn("state file ignored; targets start in their initial state", "file", d.opt.StateFile, "err", err)
		return nil
	}
	d.log.Info("states restored", "file", d.opt.StateFile, "targets", rs.Targets, "saved", rs.Written.Format(time.RFC3339),
		"saved_records", rs.Records, "waiting_for_discovery", rs.Pending.Len())
	d.pending = rs.Pending
	return rs.States
}
