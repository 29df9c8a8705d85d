package promtext

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	t.Parallel()
	text := `# HELP sonde_probes_total Probe outcomes.
# TYPE sonde_probes_total counter
sonde_probes_total{outcome="success",pool="a",protocol="tcp"} 10
sonde_probes_total{outcome="timeout",pool="a",protocol="tcp"} 2
sonde_probes_total{outcome="success",pool="b",protocol="tcp"} 5
sonde_build_info{goversion="go1.26",version="with \"quotes\", commas"} 1
sonde_lat_bucket{le="0.001"} 1
sonde_lat_bucket{le="0.01"} 3
sonde_lat_bucket{le="+Inf"} 4
sonde_lat_sum 0.5
sonde_lat_count 4
sonde_scheduler_probes_dispatched_total 1.5e+06
`
	sc, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"all series", "sonde_probes_total", nil, 17},
		{"one label", "sonde_probes_total", map[string]string{"pool": "a"}, 12},
		{"two labels", "sonde_probes_total", map[string]string{"pool": "a", "outcome": "success"}, 10},
		{"no match", "sonde_probes_total", map[string]string{"pool": "c"}, 0},
		{"escaped label value", "sonde_build_info", map[string]string{"version": `with "quotes", commas`}, 1},
		{"exponent", "sonde_scheduler_probes_dispatched_total", nil, 1.5e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sc.Sum(tt.metric, tt.labels); got != tt.want {
				t.Errorf("Sum = %v, want %v", got, tt.want)
			}
		})
	}
	h := sc.Histogram("sonde_lat", nil)
	want := []Bucket{{0.001, 1}, {0.01, 3}, {math.Inf(1), 4}}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("histogram (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`x{a="b} 1`, `x{a=b} 1`, `x`, `x{a="b"} notanumber`} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	bs := []Bucket{{0.001, 50}, {0.01, 90}, {0.1, 100}, {math.Inf(1), 100}}
	tests := []struct {
		q, want float64
	}{
		{0.5, 0.001},
		{0.25, 0.0005},
		{0.7, 0.0055},
		{0.99, 0.091},
	}
	for _, tt := range tests {
		if got := Quantile(tt.q, bs); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := MaxBound(bs); got != 0.1 {
		t.Errorf("MaxBound = %v, want 0.1", got)
	}
	if got := Quantile(0.5, []Bucket{{1, 0}, {math.Inf(1), 0}}); !math.IsNaN(got) {
		t.Errorf("Quantile of an empty histogram = %v, want NaN", got)
	}
	if got := Quantile(0.99, []Bucket{{1, 1}, {math.Inf(1), 10}}); got != 1 {
		t.Errorf("Quantile in the +Inf bucket = %v, want the highest bound 1", got)
	}
	d := HistogramDelta([]Bucket{{1, 5}, {math.Inf(1), 6}}, []Bucket{{1, 8}, {math.Inf(1), 10}})
	if diff := cmp.Diff([]Bucket{{1, 3}, {math.Inf(1), 4}}, d); diff != "" {
		t.Errorf("HistogramDelta (-want +got):\n%s", diff)
	}
}
