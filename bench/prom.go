package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is one reading of a /metrics page.
type scrape []sample

// parseMetrics reads the Prometheus text format (version 0.0.4), the format
// sonde's /metrics serves. Comments and blank lines are skipped; a line it
// cannot read is an error.
func parseMetrics(r io.Reader) (scrape, error) {
	var out scrape
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

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return s, fmt.Errorf("no value in %q", line)
	} else {
		s.name, rest = rest[:i], rest[i:]
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
			s.labels[key] = val.String()
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
	s.value = v
	return s, nil
}

// matches reports whether s has every label of want.
func (s *sample) matches(want map[string]string) bool {
	for k, v := range want {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// sum adds the values of every sample called name that has the labels of
// want.
func (sc scrape) sum(name string, want map[string]string) float64 {
	total := 0.0
	for i := range sc {
		if sc[i].name == name && sc[i].matches(want) {
			total += sc[i].value
		}
	}
	return total
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

// histogram returns the cumulative buckets of histogram name (summed over
// the series that have the labels of want), sorted by bound.
func (sc scrape) histogram(name string, want map[string]string) []bucket {
	byLE := map[float64]float64{}
	for i := range sc {
		s := &sc[i]
		if s.name != name+"_bucket" || !s.matches(want) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		byLE[le] += s.value
	}
	var out []bucket
	for le, c := range byLE {
		out = append(out, bucket{le, c})
	}
	slices.SortFunc(out, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	return out
}

// histogramDelta returns the buckets of after minus before (same bounds).
func histogramDelta(before, after []bucket) []bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.le] = b.count
	}
	out := make([]bucket, len(after))
	for i, b := range after {
		out[i] = bucket{b.le, b.count - prev[b.le]}
	}
	return out
}

// quantile estimates the q-quantile of cumulative buckets the way
// Prometheus's histogram_quantile does: linear interpolation inside the
// bucket that holds the rank, the lower bound of the first bucket being 0.
// A rank in the +Inf bucket returns the highest finite bound. It returns NaN
// for an empty histogram.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return bs[i-1].le
			}
			in := b.count - prevCount
			if in <= 0 {
				return b.le
			}
			return lower + (b.le-lower)*(rank-prevCount)/in
		}
		lower, prevCount = b.le, b.count
	}
	return bs[len(bs)-1].le
}

// maxBound returns the upper bound of the highest non-empty bucket: the
// largest observation is at most this (+Inf when it is in the last bucket).
func maxBound(bs []bucket) float64 {
	prev := 0.0
	out := 0.0
	for _, b := range bs {
		if b.count > prev {
			out = b.le
		}
		prev = b.count
	}
	return out
}
