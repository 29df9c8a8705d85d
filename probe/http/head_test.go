package http

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
)

// parseAll runs a respParser over in, handed to it in pieces of at most
// step bytes as a connection would, and returns the parser and its error
// (nil when it is done or ran out of input without an error).
func parseAll(in []byte, step int, noBody bool, want string) (*respParser, error) {
	var p respParser
	p.reset(noBody, []byte(want), 64)
	var pending []byte
	for off := 0; off < len(in) && !p.done(); {
		end := min(off+step, len(in))
		pending = append(pending, in[off:end]...)
		off = end
		used, err := p.parse(pending)
		if used < 0 || used > len(pending) {
			panic("parse consumed outside its input")
		}
		pending = pending[used:]
		if err != nil {
			return &p, err
		}
		if !p.done() && len(pending) > p.lineLimit() {
			return &p, p.tooLong()
		}
	}
	if !p.done() {
		return &p, p.eof()
	}
	return &p, nil
}

// TestRespParser covers the framing the loops' parser reads.
func TestRespParser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		head      bool
		wantErr   error // nil: success
		status    int
		bodyBytes int64
		length    int64
		found     bool
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, nil, 200, 5, 5, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: a\r\n\r\n", false, nil, 200, 5, -1, true},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nhello", false, nil, 200, 5, -1, true},
		{"bare line feeds", "HTTP/1.1 204 No Content\nX: y\n\n", false, nil, 204, 0, 0, false},
		{"interim then final", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, nil, 200, 0, 0, false},
		{"head request", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true, nil, 200, 0, 99, false},
		{"body bound", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + string(bytes.Repeat([]byte("h"), 100)), false, nil, 200, 64, 100, false},
		{"HTTP/1.0 ignores transfer encoding", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nhello", false, nil, 200, 5, -1, true},
		{"folded header", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", false, nil, 200, 0, 0, false},
		{"same length twice", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nh", false, nil, 200, 1, 1, false},
		{"not http", "SSH-2.0-x\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"code too short", "HTTP/1.1 20 OK\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"code below 100", "HTTP/1.1 099 Odd\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"bad version", "HTTP/x.1 200 OK\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"folded first line", "HTTP/1.1 200 OK\r\n X: y\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"folded length", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n 2\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nh", false, ErrMalformedResponse, 0, 0, 0, false},
		{"control in value", "HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"two transfer encodings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"chunk longer than its size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", false, ErrMalformedResponse, 0, 0, 0, false},
		{"empty", "", false, ErrEmptyResponse, 0, 0, 0, false},
		{"truncated head", "HTTP/1.1 200 OK\r\nX:", false, io.ErrUnexpectedEOF, 0, 0, 0, false},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhel", false, io.ErrUnexpectedEOF, 200, 3, 9, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, step := range []int{1, 3, len(tt.in) + 1} {
				p, err := parseAll([]byte(tt.in), step, tt.head, "hel")
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Errorf("step %d: err %v, want %v", step, err, tt.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if p.status != tt.status || p.bodyN != tt.bodyBytes || p.contentLength() != tt.length || p.found != tt.found {
					t.Errorf("step %d: status %d, body %d bytes, length %d, found %v; want %d, %d, %d, %v",
						step, p.status, p.bodyN, p.contentLength(), p.found, tt.status, tt.bodyBytes, tt.length, tt.found)
				}
			}
		})
	}
}

// FuzzResponseHead feeds the parser hostile responses: whatever the bytes
// and however they are split, it never panics, never consumes beyond its
// input, reaches the same verdict in one piece as a byte at a time, and
// agrees with net/http on the status of a head both accept.
func FuzzResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nbody until close",
	} {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole, errWhole := parseAll(in, len(in)+1, false, "lo")
		piece, errPiece := parseAll(in, int(step%16)+1, false, "lo")
		if (errWhole == nil) != (errPiece == nil) || whole.done() != piece.done() ||
			whole.status != piece.status || whole.bodyN != piece.bodyN || whole.found != piece.found {
			t.Fatalf("in one piece: done %v status %d body %d found %v err %v; in pieces of %d: done %v status %d body %d found %v err %v",
				whole.done(), whole.status, whole.bodyN, whole.found, errWhole, int(step%16)+1,
				piece.done(), piece.status, piece.bodyN, piece.found, errPiece)
		}
		if whole.bodyN > 64 {
			t.Fatalf("read %d body bytes, more than the bound 64", whole.bodyN)
		}
		if whole.inHead() || errWhole != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), nil)
		if err == nil && resp.StatusCode >= 200 && resp.StatusCode != whole.status {
			t.Fatalf("status %d, net/http read %d", whole.status, resp.StatusCode)
		}
	})
}
