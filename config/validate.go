package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	httpprobe "github.com/sondeprobe/sonde/probe/http"
)

// ErrInvalid is wrapped by every error that reports a problem in a
// configuration (as opposed to, say, a config file that cannot be read):
// errors.Is(err, ErrInvalid) tells the two apart.
var ErrInvalid = errors.New("invalid configuration")

// FieldError is a configuration problem in one field. Field is the path of the
// field in the file, such as "checks.web.fall" or "pools[0].targets[2]"; Msg
// names the value and what is allowed. It wraps [ErrInvalid] and, when a
// lower-level error caused it (a missing file, a failed lookup), that error.
type FieldError struct {
	Field string
	Msg   string
	Err   error
}

// Error returns "FIELD: MSG".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns ErrInvalid and the underlying error, if any.
func (e *FieldError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// fieldErr builds a FieldError with a formatted message.
func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// forPreset returns " for preset NAME", or "" when name is empty.
func forPreset(name string) string {
	if name == "" {
		return ""
	}
	return " for preset " + name
}

// intRange is an inclusive range of integers.
type intRange struct{ lo, hi int }

// String returns "lo..hi".
func (r intRange) String() string { return strconv.Itoa(r.lo) + ".." + strconv.Itoa(r.hi) }

// checkInt reports v outside r as "FIELD: V is out of range LO..HI[ for preset P]".
func checkInt(field string, v int, r intRange, preset string) error {
	if v < r.lo || v > r.hi {
		return fieldErr(field, "%d is out of range %s%s", v, r, forPreset(preset))
	}
	return nil
}

// durRange is an inclusive range of durations.
type durRange struct{ lo, hi time.Duration }

// String returns "lo..hi" with short durations.
func (r durRange) String() string { return formatDuration(r.lo) + ".." + formatDuration(r.hi) }

// checkDur reports v outside r, like checkInt.
func checkDur(field string, v time.Duration, r durRange, preset string) error {
	if v < r.lo || v > r.hi {
		return fieldErr(field, "%s is out of range %s%s", formatDuration(v), r, forPreset(preset))
	}
	return nil
}

// formatDuration writes d like time.Duration.String without zero trailing
// units: 1m instead of 1m0s, 24h instead of 24h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// checkEnum reports v not in allowed as `FIELD: "V" is not one of A, B[ for preset P]`.
func checkEnum(field, v string, allowed []string, preset string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fieldErr(field, "%q is not one of %s%s", v, strings.Join(allowed, ", "), forPreset(preset))
}

// maxNameLen is the longest check or pool name.
const maxNameLen = 64

// validName reports whether s is a usable check or pool name: 1..64 letters,
// digits, '-' or '_'. Names appear in metric labels and in field paths, so
// they exclude dots, spaces and punctuation.
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

const nameRule = `1..64 letters, digits, "-" or "_"`

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// gaPathExtra are the characters besides letters and digits that Global
// Accelerator allows in a path (H2).
const gaPathExtra = "-/.%?#&_;~!()*[]@$^:',+"

// maxGAPath is Global Accelerator's longest path (H2).
const maxGAPath = 80

// checkPath applies the path rules: every path is a request path the HTTP
// prober can send (httpprobe.ValidPath); with strict (preset
// globalaccelerator, H2) it is also 1..80 characters from a fixed set.
func checkPath(field, p string, strict bool, preset string) error {
	if !strings.HasPrefix(p, "/") {
		return fieldErr(field, "%q must start with \"/\"", p)
	}
	if strict {
		if len(p) > maxGAPath {
			return fieldErr(field, "%q is %d characters long, more than %d%s", p, len(p), maxGAPath, forPreset(preset))
		}
		for i := 0; i < len(p); i++ {
			if c := p[i]; !isAlnum(c) && !strings.ContainsRune(gaPathExtra, rune(c)) {
				return fieldErr(field, "%q contains %q; allowed are letters, digits and %s%s", p, string(rune(c)), gaPathExtra, forPreset(preset))
			}
		}
	}
	if !httpprobe.ValidPath(p) {
		return fieldErr(field, "%q is not a request path; want printable ASCII without spaces, not starting with \"//\"", p)
	}
	return nil
}

// resolvePath makes a path from the config relative to the config's directory.
func resolvePath(dir, p string) string {
	if filepath.IsAbs(p) || dir == "" {
		return p
	}
	return filepath.Join(dir, p)
}

// errText returns the innermost message of a file error ("no such file or
// directory"), without the path the caller already names.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
