package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

// writeScanResults prints one line per probe sent (ids below sent) in table
// order, with each probe's result (see [syn.Sweep.Result]).
func writeScanResults(w io.Writer, tab *probe.Table, sent int, result func(id uint32) (probe.Outcome, time.Duration, bool), asJSON bool) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var line []byte
	for id := range uint32(min(sent, tab.Len())) {
		ap := tab.Endpoint(id)
		o, rtt, ok := result(id)
		line = line[:0]
		if asJSON {
			line = append(line, `{"addr":"`...)
			line = ap.Addr().AppendTo(line)
			line = append(line, `","port":`...)
			line = strconv.AppendUint(line, uint64(ap.Port()), 10)
			line = append(line, `,"outcome":"`...)
			line = append(line, o.String()...)
			line = append(line, `","rtt_seconds":`...)
			if ok {
				line = strconv.AppendFloat(line, rtt.Seconds(), 'f', -1, 64)
			} else {
				line = append(line, "null"...)
			}
			line = append(line, "}\n"...)
		} else {
			line = ap.AppendTo(line)
			line = append(line, '\t')
			line = append(line, o.String()...)
			line = append(line, '\t')
			if ok {
				line = append(line, rtt.String()...)
			} else {
				line = append(line, '-')
			}
			line = append(line, '\n')
		}
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeScanSummary prints the report of a sweep that took cpu seconds of
// user and system time.
func writeScanSummary(w io.Writer, st syn.SweepStats, cpu float64) {
	d := st.Sending.Seconds()
	pps := 0.0
	if d > 0 {
		pps = float64(st.Sent) / d
	}
	cpm := 0.0
	if st.Sent > 0 {
		cpm = cpu / float64(st.Sent) * 1e6
	}
	src := st.Source4.String()
	if st.Source6.IsValid() {
		src += ", " + st.Source6.String()
	}
	path := string(st.Counters.Path)
	if st.Counters.Path == probe.PathSynBPF {
		path += " (" + st.Attach.String() + ")"
	}
	c := st.Counters
	fmt.Fprintf(w, "sonde scan: sent %d of %d probes in %.3fs (%.0f probes/s); %d replies\n",
		st.Sent, st.Probes, d, pps, st.Replies)
	if st.Resent > 0 {
		fmt.Fprintf(w, "  retries sent %d SYNs again to endpoints without an answer\n", st.Resent)
	}
	fmt.Fprintf(w, "  success %d, refused %d, unreachable %d, timeout %d (late replies %d)\n",
		st.Outcomes[probe.Success], st.Outcomes[probe.Refused], st.Outcomes[probe.Unreachable], st.Outcomes[probe.Timeout], st.Late)
	fmt.Fprintf(w, "  tcp path %s, source %s, ports %s; send errors %d, invalid cookies %d, stale %d, duplicates %d, ring drops %d, RSTs sent by eBPF %d\n",
		path, src, st.Ports, c.SendErrors, c.InvalidCookie, c.Stale, c.Duplicate, c.RingDrops, c.Answered)
	fmt.Fprintf(w, "  cpu %.2fs user+sys (%.2fs per million probes)\n", cpu, cpm)
	if st.Fallback != nil {
		fmt.Fprintf(w, "  eBPF capture unavailable, used syn-packet: %v\n", st.Fallback)
	}
}

func cpuSeconds(ru unix.Rusage) float64 {
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress draws a progress bar on a terminal until stopped.
type progress struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func startProgress(w io.Writer, total int, sw *syn.Sweep) *progress {
	pr := &progress{done: make(chan struct{})}
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-pr.done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
			}
			sent, replies := sw.Progress()
			frac := float64(sent) / float64(total)
			const width = 30
			bar := strings.Repeat("=", int(frac*width)) + strings.Repeat(" ", width-int(frac*width))
			fmt.Fprintf(w, "\r\033[K[%s] %3.0f%% sent %d/%d, %d replies, %.0f probes/s",
				bar, frac*100, sent, total, replies, float64(sent)/time.Since(start).Seconds())
		}
	}()
	return pr
}

func (pr *progress) stop() {
	close(pr.done)
	pr.wg.Wait()
}
