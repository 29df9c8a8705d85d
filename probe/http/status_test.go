package http

import (
	"testing"
)

func TestParseStatusCodes(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string // String() of the set
		in1     []int  // codes that must be in the set
		out     []int  // codes that must not
		wantErr string
	}{
		{name: "range", in: "200-299", want: "200-299", in1: []int{200, 250, 299}, out: []int{199, 300, 0, 1000}},
		{name: "app gateway", in: "200-399,403", want: "200-399,403", in1: []int{301, 399, 403}, out: []int{400, 404}},
		{name: "codes", in: "200,204,403", want: "200,204,403", in1: []int{204}, out: []int{201}},
		{name: "spaces and overlap", in: " 200 - 204 , 204-206,100", want: "100,200-206", in1: []int{100, 205}},
		{name: "adjacent merge", in: "200,201,202", want: "200-202"},
		{name: "whole range", in: "100-599", want: "100-599", in1: []int{100, 599}, out: []int{99, 600}},
		{name: "empty", in: " ", wantErr: `status set " ": no status codes`},
		{name: "empty element", in: "200,", wantErr: `status set "200,": element 2 is empty`},
		{name: "too low", in: "99", wantErr: `status set "99": element "99" is out of range 100..599`},
		{name: "too high", in: "200-600", wantErr: `status set "200-600": element "200-600" is out of range 100..599`},
		{name: "long number", in: "0200", wantErr: `status set "0200": element "0200" is out of range 100..599`},
		{name: "reversed", in: "299-200", wantErr: `status set "299-200": element "299-200" has its start after its end`},
		{name: "word", in: "2xx", wantErr: `status set "2xx": element "2xx" is not a status code or range`},
		{name: "sign", in: "+200", wantErr: `status set "+200": element "+200" is not a status code or range`},
		{name: "open range", in: "200-", wantErr: `status set "200-": element "200-" is not a status code or range`},
		{name: "double dash", in: "200-300-400", wantErr: `status set "200-300-400": element "200-300-400" is not a status code or range`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := ParseStatusCodes(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseStatusCodes(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseStatusCodes(%q): %v", tt.in, err)
			}
			if got := set.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			for _, c := range tt.in1 {
				if !set.Contains(c) {
					t.Errorf("Contains(%d) = false, want true", c)
				}
			}
			for _, c := range tt.out {
				if set.Contains(c) {
					t.Errorf("Contains(%d) = true, want false", c)
				}
			}
		})
	}
}

func TestStatusCodesZero(t *testing.T) {
	var s StatusCodes
	if !s.IsEmpty() || s.Len() != 0 || s.String() != "" || s.Contains(200) {
		t.Errorf("zero StatusCodes = %q (len %d), want empty", s.String(), s.Len())
	}
	s = MustParseStatusCodes("200-299,404")
	if s.Len() != 101 {
		t.Errorf("Len() = %d, want 101", s.Len())
	}
}

func TestStatusCodesContainsDoesNotAllocate(t *testing.T) {
	s := MustParseStatusCodes("200-399,403")
	allocs := testing.AllocsPerRun(100, func() {
		for c := 0; c < 700; c++ {
			_ = s.Contains(c)
		}
	})
	if allocs != 0 {
		t.Errorf("Contains allocates %v times per run, want 0", allocs)
	}
}

func BenchmarkStatusCodesContains(b *testing.B) {
	s := MustParseStatusCodes("200-399,403")
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if s.Contains(n%600 + 50) {
			n++
		}
		n++
	}
}

// FuzzParseStatusCodes checks that the parser never panics and that String
// round-trips: it re-parses to the same set, and is a fixed point.
func FuzzParseStatusCodes(f *testing.F) {
	for _, s := range []string{"200-299", "200-399,403", "200", "100-599", "200,,", "299-200", "0", "2xx", " 204 , 301-302 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		set, err := ParseStatusCodes(in)
		if err != nil {
			if _, ok := err.(*StatusCodesError); !ok {
				t.Fatalf("error %v is %T, want *StatusCodesError", err, err)
			}
			return
		}
		if set.IsEmpty() {
			t.Fatalf("ParseStatusCodes(%q) returned an empty set without error", in)
		}
		s := set.String()
		again, err := ParseStatusCodes(s)
		if err != nil {
			t.Fatalf("String() %q of %q does not re-parse: %v", s, in, err)
		}
		if again != set {
			t.Fatalf("round trip of %q via %q changed the set to %q", in, s, again.String())
		}
		if again.String() != s {
			t.Fatalf("String() is not stable: %q then %q", s, again.String())
		}
	})
}
