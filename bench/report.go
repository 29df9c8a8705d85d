package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sondeprobe/sonde/bench/host"
)

// Status is how a scenario ended.
type Status string

// The scenario statuses.
const (
	StatusOK      Status = "ok"      // ran; every goal it checks was reached
	StatusMissed  Status = "missed"  // ran; at least one goal was not reached
	StatusSkipped Status = "skipped" // not run: a tool it needs is missing
	StatusFailed  Status = "failed"  // could not run to its end: see Error
)

// Report is the result of one [Run]: the machine, the fleets and every
// scenario, in the order they ran.
type Report struct {
	Machine   host.Machine `json:"machine"`
	Fleets    []FleetInfo  `json:"fleets"`
	Scenarios []*Scenario  `json:"scenarios"`
}

// FleetInfo describes one fleet the scenarios ran against.
type FleetInfo struct {
	Prefix string `json:"prefix"` // the addresses the fleet answers for
	// AnsweredBy is who answers the probes: "kernel" (the fleet
	// namespace's TCP stack), "xdp-generic" or "xdp-native" (the XDP
	// responder); a scenario's Fleet names it.
	AnsweredBy string `json:"answered_by"`
	ProberNS   string `json:"prober_ns"`           // network namespace of the probers
	FleetNS    string `json:"fleet_ns"`            // network namespace answering for the prefix
	ImpairNS   string `json:"impair_ns,omitempty"` // namespace of the impairment stage between them, if any
	Kept       bool   `json:"kept"`                // the namespaces were left in place (-keep)
	Dir        string `json:"dir"`                 // the run's files (configs, scanner outputs); removed unless kept
}

// Scenario is one scenario's result on one fleet.
type Scenario struct {
	Name    string   `json:"name"`
	Fleet   string   `json:"fleet"` // the fleet it ran on: FleetInfo.AnsweredBy
	Status  Status   `json:"status"`
	Seconds float64  `json:"seconds"`            // how long the scenario took, setup included
	Measure string   `json:"measure"`            // what was measured, in one sentence
	Command []string `json:"commands,omitempty"` // the command lines it ran
	Metrics []Metric `json:"metrics"`
	Goals   []Goal   `json:"goals,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	Tables  []*Table `json:"tables,omitempty"` // side-by-side results, printed after the goals
	Error   string   `json:"error,omitempty"`
}

// Table is a scenario's results side by side: one row per case.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Metric is one measured number. When a scenario repeats a measurement, Value
// is the median and Runs holds every run's value.
type Metric struct {
	Name  string    `json:"name"`
	Value float64   `json:"value"`
	Unit  string    `json:"unit,omitempty"`
	Text  string    `json:"text,omitempty"` // a value that is not a number (a path, a version)
	Runs  []float64 `json:"runs,omitempty"`
}

// Goal is one of the performance goals of sonde bench as a scenario checked
// it.
type Goal struct {
	What string `json:"what"` // the goal, e.g. "sweep rate ≥ 2× zmap"
	Got  string `json:"got"`  // what was measured against it
	Met  bool   `json:"met"`
}

// add appends a metric.
func (s *Scenario) add(name string, v float64, unit string) {
	s.Metrics = append(s.Metrics, Metric{Name: name, Value: v, Unit: unit})
}

// addRuns appends a metric whose value is the median of runs.
func (s *Scenario) addRuns(name string, runs []float64, unit string) {
	m := Metric{Name: name, Value: median(runs), Unit: unit}
	if len(runs) > 1 {
		m.Runs = runs
	}
	s.Metrics = append(s.Metrics, m)
}

// addText appends a metric whose value is text.
func (s *Scenario) addText(name, text string) {
	s.Metrics = append(s.Metrics, Metric{Name: name, Text: text})
}

// goal records a goal and whether it was met.
func (s *Scenario) goal(what string, met bool, format string, args ...any) {
	s.Goals = append(s.Goals, Goal{What: what, Got: fmt.Sprintf(format, args...), Met: met})
}

// note appends a line of explanation.
func (s *Scenario) note(format string, args ...any) {
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

// Metric returns the metric called name, or false.
func (s *Scenario) Metric(name string) (Metric, bool) {
	for _, m := range s.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// finish sets the status from the goals, unless the scenario failed or was
// skipped.
func (s *Scenario) finish() {
	if s.Status == StatusFailed || s.Status == StatusSkipped {
		return
	}
	s.Status = StatusOK
	for _, g := range s.Goals {
		if !g.Met {
			s.Status = StatusMissed
		}
	}
}

// median returns the median of xs (the mean of the middle two for an even
// count), or NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// NaN is not JSON: a metric that could not be measured reads as null.
	return enc.Encode(jsonSafe(r))
}

// jsonSafe returns a copy of r whose NaN and infinite values are zero, with
// a note in the metric's text.
func jsonSafe(r *Report) *Report {
	c := *r
	c.Scenarios = make([]*Scenario, len(r.Scenarios))
	for i, s := range r.Scenarios {
		sc := *s
		sc.Metrics = slices.Clone(s.Metrics)
		for j := range sc.Metrics {
			m := &sc.Metrics[j]
			if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
				m.Value = 0
				if m.Text == "" {
					m.Text = "not measured"
				}
			}
		}
		c.Scenarios[i] = &sc
	}
	return &c
}

// WriteTable writes the report as text: the machine, then a table of every
// scenario's metrics, then the goals and notes.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "machine: %s\n", r.Machine)
	for _, f := range r.Fleets {
		kept := "removed"
		if f.Kept {
			kept = "kept, with the run's files in " + f.Dir + "; its listeners and XDP program ended with the run"
		}
		fmt.Fprintf(&b, "fleet:   %s answered by %s in %s, probers in %s (%s)\n", f.Prefix, f.AnsweredBy, f.FleetNS, f.ProberNS, kept)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tSTATUS\tMETRIC\tVALUE\tUNIT\tRUNS")
	for _, s := range r.Scenarios {
		name, status := s.label(), string(s.Status)
		if len(s.Metrics) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t\t\t\n", name, status)
		}
		for _, m := range s.Metrics {
			format := formatValue
			if m.Unit == "%" {
				format = formatPercent
			}
			v := m.Text
			if v == "" {
				v = format(m.Value)
			}
			var runs []string
			for _, x := range m.Runs {
				runs = append(runs, format(x))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, status, m.Name, v, m.Unit, strings.Join(runs, " "))
			name, status = "", ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Scenarios {
		if len(s.Goals)+len(s.Notes)+len(s.Tables) == 0 && s.Error == "" && s.Measure == "" {
			continue
		}
		fmt.Fprintf(&b, "\n%s (%s, %.0fs): %s\n", s.label(), s.Status, s.Seconds, s.Measure)
		for _, g := range s.Goals {
			mark := "MET   "
			if !g.Met {
				mark = "MISSED"
			}
			fmt.Fprintf(&b, "  goal %s %s: %s\n", mark, g.What, g.Got)
		}
		if s.Error != "" {
			fmt.Fprintf(&b, "  error: %s\n", s.Error)
		}
		for _, t := range s.Tables {
			if err := t.write(&b); err != nil {
				return err
			}
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		for _, c := range s.Command {
			fmt.Fprintf(&b, "  ran: %s\n", c)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// write prints the table, indented, with aligned columns.
func (t *Table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.Join(t.Columns, "\t"))
	for _, r := range t.Rows {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// label names the scenario and its fleet, as in "sweep/xdp-generic".
func (s *Scenario) label() string {
	if s.Fleet == "" {
		return s.Name
	}
	return s.Name + "/" + s.Fleet
}

// formatValue prints a number with as many digits as it needs and no more.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// formatPercent prints a percentage with three decimals, so 99.998 never
// reads as 100.
func formatPercent(v float64) string {
	if v == 100 || v == 0 {
		return formatValue(v)
	}
	return strconv.FormatFloat(math.Floor(v*1000)/1000, 'f', 3, 64)
}
