// Package promtext reads the Prometheus text exposition format that
// sonde's /metrics serves, for the benchmarks that scrape a daemon: sums of
// series by labels, histograms, their differences and quantiles.
package promtext

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Sample is one line of the Prometheus text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is one reading of a /metrics page.
type Scrape []Sample

// Parse reads the Prometheus text format (version 0.0.4), the format
// sonde's /metrics serves. Comments and blank lines are skipped; a line it
// cannot read is an error.
func Parse(r io.Reader) (Scrape, error) {
	var out Scrape
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return s, fmt.Errorf("no value in %q", line)
	} else {
		s.Name, rest = rest[:i], rest[i:]
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("bad labels in %q", line)
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[i])
					}
					continue
				}
				if c == '"' {
					rest = rest[i+1:]
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return s, fmt.Errorf("unterminated label value in %q", line)
			}
			s.Labels[key] = val.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("value of %q: %w", line, err)
	}
	s.Value = v
	return s, nil
}

// matches reports whether s has every label of want.
func (s *Sample) matches(want map[string]string) bool {
	for k, v := range want {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// Sum adds the values of every sample called name that has the labels of
// want.
func (sc Scrape) Sum(name string, want map[string]string) float64 {
	total := 0.0
	for i := range sc {
		if sc[i].Name == name && sc[i].matches(want) {
			total += sc[i].Value
		}
	}
	return total
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	LE    float64 // upper bound
	Count float64 // observations at most LE
}

// Histogram returns the cumulative buckets of histogram name (summed over
// the series that have the labels of want), sorted by bound.
func (sc Scrape) Histogram(name string, want map[string]string) []Bucket {
	byLE := map[float64]float64{}
	for i := range sc {
		s := &sc[i]
		if s.Name != name+"_bucket" || !s.matches(want) {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		byLE[le] += s.Value
	}
	var out []Bucket
	for le, c := range byLE {
		out = append(out, Bucket{le, c})
	}
	slices.SortFunc(out, func(a, b Bucket) int {
		switch {
		case a.LE < b.LE:
			return -1
		case a.LE > b.LE:
			return 1
		}
		return 0
	})
	return out
}

// HistogramDelta returns the buckets of after minus before (same bounds).
func HistogramDelta(before, after []Bucket) []Bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.LE] = b.Count
	}
	out := make([]Bucket, len(after))
	for i, b := range after {
		out[i] = Bucket{b.LE, b.Count - prev[b.LE]}
	}
	return out
}

// Quantile estimates the q-quantile of cumulative buckets the way
// Prometheus's histogram_quantile does: linear interpolation inside the
// bucket that holds the rank, the lower bound of the first bucket being 0.
// A rank in the +Inf bucket returns the highest finite bound. It returns NaN
// for an empty histogram.
func Quantile(q float64, bs []Bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].Count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, b := range bs {
		if b.Count >= rank {
			if math.IsInf(b.LE, 1) {
				if i == 0 {
					return math.NaN()
				}
				return bs[i-1].LE
			}
			in := b.Count - prevCount
			if in <= 0 {
				return b.LE
			}
			return lower + (b.LE-lower)*(rank-prevCount)/in
		}
		lower, prevCount = b.LE, b.Count
	}
	return bs[len(bs)-1].LE
}

// MaxBound returns the upper bound of the highest non-empty bucket: the
// largest observation is at most this (+Inf when it is in the last bucket).
func MaxBound(bs []Bucket) float64 {
	prev := 0.0
	out := 0.0
	for _, b := range bs {
		if b.Count > prev {
			out = b.LE
		}
		prev = b.Count
	}
	return out
}
