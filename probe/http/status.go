package http

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// The status codes a [StatusCodes] can hold (H3).
const (
	MinStatus = 100
	MaxStatus = 599
)

// StatusCodes is a set of HTTP status codes, such as the healthy codes of an
// HTTP check (H3), the [StatusSet] the configuration gives [Options.Healthy]
// and the grammar its healthy_status is written in. It is a fixed-size bitmap over [MinStatus]..[MaxStatus]:
// comparable with ==, free of pointers, and [StatusCodes.Contains] never
// allocates. The zero StatusCodes is empty.
type StatusCodes struct {
	bits [(MaxStatus - MinStatus + 64) / 64]uint64
}

// StatusCodesError is the error of [ParseStatusCodes]: it names the input
// and the first bad element.
type StatusCodesError struct {
	Input  string // the text given to ParseStatusCodes
	Reason string // what is wrong, e.g. `element "600" is out of range 100..599`
}

// Error returns `status set "INPUT": REASON`.
func (e *StatusCodesError) Error() string { return fmt.Sprintf("status set %q: %s", e.Input, e.Reason) }

// ParseStatusCodes parses a comma-separated list of status codes and
// inclusive ranges, such as "200-399,403". Spaces around elements are
// ignored. Codes must lie in 100..599; an error names the first bad element.
func ParseStatusCodes(s string) (StatusCodes, error) {
	var set StatusCodes
	if strings.TrimSpace(s) == "" {
		return set, &StatusCodesError{Input: s, Reason: "no status codes"}
	}
	for i, elem := range strings.Split(s, ",") {
		elem = strings.TrimSpace(elem)
		if elem == "" {
			return StatusCodes{}, &StatusCodesError{Input: s, Reason: fmt.Sprintf("element %d is empty", i+1)}
		}
		lo, hi, err := parseStatusRange(elem)
		if err != nil {
			return StatusCodes{}, &StatusCodesError{Input: s, Reason: fmt.Sprintf("element %q %s", elem, err.Error())}
		}
		set.AddRange(lo, hi)
	}
	return set, nil
}

// parseStatusRange parses "200" or "200-299". The error text completes the
// sentence "element X ...".
func parseStatusRange(elem string) (lo, hi int, err error) {
	first, last, isRange := strings.Cut(elem, "-")
	lo, ok := parseStatusCode(strings.TrimSpace(first))
	if !ok {
		return 0, 0, errors.New("is not a status code or range")
	}
	hi = lo
	if isRange {
		if hi, ok = parseStatusCode(strings.TrimSpace(last)); !ok {
			return 0, 0, errors.New("is not a status code or range")
		}
	}
	switch {
	case lo < MinStatus || lo > MaxStatus || hi < MinStatus || hi > MaxStatus:
		return 0, 0, fmt.Errorf("is out of range %d..%d", MinStatus, MaxStatus)
	case lo > hi:
		return 0, 0, errors.New("has its start after its end")
	}
	return lo, hi, nil
}

// parseStatusCode accepts one to three decimal digits (a longer number is out
// of range anyway and is reported as 1000).
func parseStatusCode(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	if len(s) > 3 {
		return 1000, true
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// MustParseStatusCodes is [ParseStatusCodes] for constants; it panics on error.
func MustParseStatusCodes(s string) StatusCodes {
	set, err := ParseStatusCodes(s)
	if err != nil {
		panic(err)
	}
	return set
}

// AddRange adds the codes lo..hi (inclusive); codes outside 100..599 are ignored.
func (s *StatusCodes) AddRange(lo, hi int) {
	lo = max(lo, MinStatus)
	hi = min(hi, MaxStatus)
	for c := lo; c <= hi; c++ {
		i := c - MinStatus
		s.bits[i>>6] |= 1 << (i & 63)
	}
}

// Contains reports whether code is in the set.
func (s *StatusCodes) Contains(code int) bool {
	i := uint(code - MinStatus)
	if i > MaxStatus-MinStatus {
		return false
	}
	return s.bits[i>>6]&(1<<(i&63)) != 0
}

// Len returns the number of codes in the set.
func (s *StatusCodes) Len() int {
	n := 0
	for _, w := range s.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether the set holds no code.
func (s *StatusCodes) IsEmpty() bool { return s.bits == [len(s.bits)]uint64{} }

// String returns the set in the form ParseStatusCodes reads, with runs of
// consecutive codes as ranges: "200-399,403". The empty set is "".
func (s StatusCodes) String() string {
	var b strings.Builder
	for c := MinStatus; c <= MaxStatus; c++ {
		if !s.Contains(c) {
			continue
		}
		end := c
		for end+1 <= MaxStatus && s.Contains(end+1) {
			end++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c))
		if end > c {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(end))
		}
		c = end
	}
	return b.String()
}

// MarshalText encodes the set as its String.
func (s StatusCodes) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
