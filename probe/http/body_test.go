package http

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestScanBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		body      string
		want      string
		limit     int64
		bufSize   int
		oneByte   bool // reader returns one byte per Read
		found     bool
		wantBytes int64
	}{
		{"empty want", "abc", "", 100, 8, false, true, 3},
		{"found", "hello world", "world", 100, 16, false, true, 11},
		{"not found", "hello world", "there", 100, 16, false, false, 11},
		{"across reads", "aaaaaaaneedleaaaa", "needle", 100, 8, false, true, 17},
		{"one byte at a time", "xxneedlexx", "needle", 100, 7, true, true, 10},
		{"limit cuts the match", "0123456789needle", "needle", 15, 8, false, false, 15},
		{"limit just fits", "0123456789needle", "needle", 16, 8, false, true, 16},
		{"limit bounds reading", strings.Repeat("z", 1000), "needle", 64, 8, false, false, 64},
		{"repeated prefix", "nenenenedle needle", "needle", 100, 7, false, true, 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tt.body)
			if tt.oneByte {
				r = iotest.OneByteReader(r)
			}
			cr := &countingReader{r: r}
			found, n, err := scanBody(cr, []byte(tt.want), tt.limit, make([]byte, tt.bufSize))
			if err != nil {
				t.Fatal(err)
			}
			if found != tt.found || n != tt.wantBytes || int64(cr.n) != n {
				t.Errorf("found %v after %d bytes (reader gave %d), want %v after %d", found, n, cr.n, tt.found, tt.wantBytes)
			}
		})
	}
}

func TestScanBodyError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("needle"), iotest.ErrReader(boom))
	found, n, err := scanBody(r, []byte("needle"), 100, make([]byte, 16))
	if !found || n != 6 || !errors.Is(err, boom) {
		t.Errorf("scanBody = %v, %d, %v; want true, 6, boom", found, n, err)
	}
}
