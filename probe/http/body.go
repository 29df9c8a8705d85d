package http

import (
	"bytes"
	"io"
)

// scanBody reads r until EOF or until limit bytes, and reports whether want
// occurs in what it read (always true for an empty want). It searches as it
// reads, keeping only len(want)-1 bytes between reads, so buf (scratch space;
// len(buf) must exceed len(want)) bounds its memory whatever the limit. It
// returns the number of bytes read and the first read error other than EOF.
func scanBody(r io.Reader, want []byte, limit int64, buf []byte) (found bool, n int64, err error) {
	found = len(want) == 0
	keep := 0 // bytes at the start of buf carried over from the last read
	for n < limit {
		chunk := buf[keep:]
		if rest := limit - n; int64(len(chunk)) > rest {
			chunk = chunk[:rest]
		}
		m, rerr := r.Read(chunk)
		n += int64(m)
		if !found && m > 0 {
			window := buf[:keep+m]
			found = bytes.Contains(window, want)
			keep = min(len(want)-1, len(window))
			copy(buf, window[len(window)-keep:])
		}
		if found {
			keep = 0
		}
		if rerr == io.EOF {
			return found, n, nil
		}
		if rerr != nil {
			return found, n, rerr
		}
	}
	return found, n, nil
}
