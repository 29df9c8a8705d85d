package http

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Errors of the response parser of the event-loop path; all of them make a
// probe an InvalidResponse. They are wrapped: test them with errors.Is.
var (
	// ErrMalformedResponse: the response breaks HTTP/1.1's grammar (status
	// line, header line, Content-Length, Transfer-Encoding or chunk framing).
	ErrMalformedResponse = errors.New("malformed HTTP response")
)

// maxChunkLine bounds a chunk-size or trailer line, as net/http does.
const maxChunkLine = 4096

// parseState is where a respParser is in the response.
type parseState uint8

const (
	stStatus    parseState = iota // expecting a status line
	stHeader                      // expecting a header line or the blank line
	stIdentity                    // body of known length: remain bytes left
	stUntilEOF                    // body delimited by the connection's close
	stChunkSize                   // expecting a chunk-size line
	stChunkData                   // in a chunk: remain bytes left
	stChunkEnd                    // expecting the CRLF after a chunk's data
	stTrailer                     // expecting a trailer line or the blank line
	stDone                        // the response is complete, or its bound read
)

// headerKind names the headers the parser acts on.
type headerKind uint8

const (
	hdrOther headerKind = iota
	hdrNone             // no header line yet: a folded line has nothing to continue
	hdrContentLength
	hdrTransferEncoding
)

// respParser reads one HTTP/1.x response as it arrives, without allocating:
// the status line and headers (skipping interim 1xx responses other than
// 101), then the body framed by Content-Length, chunked transfer coding or
// the connection's close, searching the body for a substring as it goes. It
// bounds what it accepts: heads to maxHeaderBytes together, chunk-size and
// trailer lines to maxChunkLine, chunk framing to maxHeaderBytes plus 16
// bytes per body byte, and reads no more than maxBody bytes of body.
//
// The grammar follows net/http's ReadResponse: an "HTTP/major.minor" status
// line with a three-digit code, header names that are tokens, values of
// visible characters, spaces and tabs, folded lines accepted except for
// the headers that frame the body, one Content-Length value (repeats must
// agree), and only "chunked" as a Transfer-Encoding, which HTTP/1.0
// responses do not use. Unlike it, codes below 100 are refused, and a
// response that does not start with "HTTP/" is refused at its fifth byte
// rather than at its first line feed.
//
// A respParser is owned by one connection and is not safe for concurrent
// use.
type respParser struct {
	// Per probe, set by reset.
	noBody  bool   // HEAD request: no response has a body
	want    []byte // body substring; empty for none
	maxBody int64  // body bytes to read at most

	state     parseState
	status    int
	proto11   bool       // HTTP/1.1 or later
	clen      int64      // Content-Length, -1 without one
	chunked   bool       // Transfer-Encoding: chunked
	teSeen    bool       // a Transfer-Encoding header was seen
	last      headerKind // kind of the last header line, for folded lines
	headBytes int        // bytes of status lines and headers so far, interim responses included
	scanned   int        // bytes at the start of the unconsumed input known to hold no line feed
	remain    int64      // body bytes left in the body (stIdentity) or chunk (stChunkData)
	framing   int64      // chunk-size, chunk-end and trailer bytes so far
	started   bool       // some byte of the response has been parsed
	bodyN     int64      // body bytes read
	found     bool       // want occurs in the body read so far
	carry     []byte     // the last len(want)-1 body bytes, when not found yet
	scratch   []byte     // room to search across a boundary: 2*len(want) bytes
}

// reset readies p for a new response to a request that is HEAD when
// noBody; scratch space is reused and grown at most once per size of want.
func (p *respParser) reset(noBody bool, want []byte, maxBody int64) {
	carry, scratch := p.carry[:0], p.scratch
	if need := 2 * len(want); cap(scratch) < need {
		scratch = make([]byte, need)
		carry = make([]byte, 0, need)
	}
	*p = respParser{noBody: noBody, want: want, maxBody: maxBody, clen: -1,
		carry: carry, scratch: scratch[:cap(scratch)], found: len(want) == 0}
}

// done reports whether the response is complete or its body bound read.
func (p *respParser) done() bool { return p.state == stDone }

// inHead reports whether the parser still reads a response head.
func (p *respParser) inHead() bool { return p.state <= stHeader }

// lineLimit is the longest line the parser accepts in its current state.
func (p *respParser) lineLimit() int {
	if p.inHead() {
		return maxHeaderBytes - p.headBytes
	}
	return maxChunkLine
}

// parse consumes what it can of in, the bytes received and not yet
// consumed, and returns how many it consumed; an incomplete line is left for
// the caller to present again with more bytes after it. It stops at the end
// of the response or the body bound (done), or at the first error.
func (p *respParser) parse(in []byte) (used int, err error) {
	for used < len(in) && p.state != stDone {
		rest := in[used:]
		switch p.state {
		case stIdentity, stChunkData, stUntilEOF:
			n := len(rest)
			if p.state != stUntilEOF && int64(n) > p.remain {
				n = int(p.remain)
			}
			p.body(rest[:n])
			used += n
			p.remain -= int64(n)
			switch {
			case p.bodyN >= p.maxBody:
				p.state = stDone
			case p.remain > 0 || p.state == stUntilEOF:
			case p.state == stIdentity:
				p.state = stDone
			default:
				p.state = stChunkEnd
			}
			continue
		}
		if !p.started {
			p.started = true
		}
		if p.state == stStatus && p.headBytes == 0 && !hasHTTPPrefix(rest) {
			return used, fmt.Errorf("%w: status line %q does not start with HTTP/", ErrMalformedResponse, quoteStart(rest))
		}
		i := bytes.IndexByte(rest[p.scanned:], '\n')
		if i < 0 {
			p.scanned = len(rest)
			if len(rest) > p.lineLimit() {
				return used, p.tooLong()
			}
			return used, nil
		}
		n := p.scanned + i + 1
		p.scanned = 0
		if n > p.lineLimit() {
			return used, p.tooLong()
		}
		line := rest[:n-1]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		used += n
		if err := p.line(line, n); err != nil {
			return used, err
		}
	}
	return used, nil
}

// tooLong is the error of a line beyond lineLimit.
func (p *respParser) tooLong() error {
	if p.inHead() {
		return ErrHeaderTooLarge
	}
	return fmt.Errorf("%w: chunk or trailer line longer than %d bytes", ErrMalformedResponse, maxChunkLine)
}

// line handles one complete line (without its end) that took n bytes.
func (p *respParser) line(line []byte, n int) error {
	switch p.state {
	case stStatus:
		p.headBytes += n
		return p.statusLine(line)
	case stHeader:
		p.headBytes += n
		if len(line) == 0 {
			return p.endHead()
		}
		return p.header(line)
	case stChunkSize:
		return p.chunkSize(line, n)
	case stChunkEnd:
		if err := p.frame(n); err != nil {
			return err
		}
		if len(line) != 0 {
			return fmt.Errorf("%w: chunk data longer than its size", ErrMalformedResponse)
		}
		p.state = stChunkSize
		return nil
	case stTrailer:
		if err := p.frame(n); err != nil {
			return err
		}
		if len(line) == 0 {
			p.state = stDone
		}
		return nil
	}
	return nil
}

// frame counts n bytes of chunk framing against their bound.
func (p *respParser) frame(n int) error {
	p.framing += int64(n)
	if p.framing > maxHeaderBytes+16*p.bodyN {
		return fmt.Errorf("%w: chunked encoding with too much framing (%d bytes for %d of body)", ErrMalformedResponse, p.framing, p.bodyN)
	}
	return nil
}

// statusLine parses "HTTP/major.minor SP code [SP reason]".
func (p *respParser) statusLine(line []byte) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: %s in status line %q", ErrMalformedResponse, what, quoteStart(line))
	}
	proto, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return bad("no status code")
	}
	major, minor, ok := parseVersion(proto)
	if !ok {
		return bad("bad version")
	}
	rest = bytes.TrimLeft(rest, " ")
	code, _, _ := bytes.Cut(rest, []byte{' '})
	if len(code) != 3 || code[0] < '1' || code[0] > '9' || !isDigit(code[1]) || !isDigit(code[2]) {
		return bad("bad status code")
	}
	p.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	p.proto11 = major > 1 || major == 1 && minor >= 1
	p.clen, p.chunked, p.teSeen, p.last = -1, false, false, hdrNone
	p.state = stHeader
	return nil
}

// parseVersion parses "HTTP/major.minor", each of one to seven digits.
func parseVersion(b []byte) (major, minor int, ok bool) {
	v, found := bytes.CutPrefix(b, []byte("HTTP/"))
	if !found {
		return 0, 0, false
	}
	maj, mnr, found := bytes.Cut(v, []byte{'.'})
	if !found {
		return 0, 0, false
	}
	major, ok1 := smallNumber(maj)
	minor, ok2 := smallNumber(mnr)
	return major, minor, ok1 && ok2
}

// smallNumber parses one to seven decimal digits.
func smallNumber(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 7 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// header parses one header line, acting on Content-Length and
// Transfer-Encoding.
func (p *respParser) header(line []byte) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: %s in header line %q", ErrMalformedResponse, what, quoteStart(line))
	}
	if line[0] == ' ' || line[0] == '\t' { // a folded line continues the last header
		if p.last != hdrOther {
			return bad("folded framing header")
		}
		if !validValue(line) {
			return bad("invalid character")
		}
		return nil
	}
	name, value, ok := bytes.Cut(line, []byte{':'})
	if !ok || !validToken(name) {
		return bad("bad name")
	}
	if !validValue(value) {
		return bad("invalid character")
	}
	value = bytes.Trim(value, " \t")
	p.last = hdrOther
	switch {
	case asciiEqualFold(name, "Content-Length"):
		p.last = hdrContentLength
		n, ok := parseLength(value)
		if !ok {
			return bad("bad Content-Length")
		}
		if p.clen >= 0 && p.clen != n {
			return bad("second, different Content-Length")
		}
		p.clen = n
	case asciiEqualFold(name, "Transfer-Encoding"):
		p.last = hdrTransferEncoding
		if !p.proto11 {
			return nil // HTTP/1.0 has no transfer codings: ignored
		}
		if p.teSeen || !asciiEqualFold(value, "chunked") {
			return bad("unsupported Transfer-Encoding")
		}
		p.teSeen, p.chunked = true, true
	}
	return nil
}

// endHead ends a response head: an interim response starts the next head,
// a final one its body.
func (p *respParser) endHead() error {
	switch {
	case p.status < 200 && p.status != 101:
		p.state = stStatus
		return nil
	case p.noBody || p.status < 200 || p.status == 204 || p.status == 304 || p.maxBody <= 0:
		p.state = stDone
	case p.chunked:
		p.state = stChunkSize
	case p.clen == 0:
		p.state = stDone
	case p.clen > 0:
		p.state, p.remain = stIdentity, p.clen
	default:
		p.state = stUntilEOF
	}
	return nil
}

// contentLength is the response's length as [probe.Report] gives it: the
// Content-Length of a HEAD response (-1 without one), 0 for a status that
// has no body, -1 for a chunked or close-delimited body.
func (p *respParser) contentLength() int64 {
	switch {
	case p.noBody:
		return p.clen
	case p.status < 200 || p.status == 204 || p.status == 304:
		return 0
	case p.chunked:
		return -1
	}
	return p.clen
}

// chunkSize parses a chunk-size line: hexadecimal digits, then optional
// extensions after ';', which are ignored.
func (p *respParser) chunkSize(line []byte, n int) error {
	if err := p.frame(n); err != nil {
		return err
	}
	size, _, _ := bytes.Cut(line, []byte{';'})
	size = bytes.TrimRight(size, " \t")
	if len(size) == 0 || len(size) > 15 {
		return fmt.Errorf("%w: bad chunk size %q", ErrMalformedResponse, quoteStart(line))
	}
	var v int64
	for _, c := range size {
		d, ok := unhex(c)
		if !ok {
			return fmt.Errorf("%w: bad chunk size %q", ErrMalformedResponse, quoteStart(line))
		}
		v = v<<4 | int64(d)
	}
	if v == 0 {
		p.state = stTrailer
		return nil
	}
	p.state, p.remain = stChunkData, v
	return nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// eof tells the parser that the connection closed: the end of a
// close-delimited body, an empty response, or a truncated one.
func (p *respParser) eof() error {
	switch {
	case p.state == stDone:
		return nil
	case p.state == stUntilEOF:
		p.state = stDone
		return nil
	case !p.started:
		return ErrEmptyResponse
	}
	return io.ErrUnexpectedEOF
}

// body takes a segment of body data, within the body bound.
func (p *respParser) body(seg []byte) {
	if left := p.maxBody - p.bodyN; int64(len(seg)) > left {
		seg = seg[:left]
	}
	p.bodyN += int64(len(seg))
	if p.found || len(seg) == 0 {
		return
	}
	w := len(p.want)
	// Across the boundary: the carried bytes and the segment's first ones.
	k := copy(p.scratch, p.carry)
	k += copy(p.scratch[k:], seg[:min(len(seg), w-1)])
	if bytes.Contains(p.scratch[:k], p.want) || bytes.Contains(seg, p.want) {
		p.found = true
		return
	}
	// Keep the last w-1 bytes of carry+seg.
	if len(seg) >= w-1 {
		p.carry = append(p.carry[:0], seg[len(seg)-(w-1):]...)
		return
	}
	keep := min(len(p.carry), w-1-len(seg))
	p.carry = append(p.carry[:copy(p.carry, p.carry[len(p.carry)-keep:])], seg...)
}

// hasHTTPPrefix reports whether b could start with "HTTP/": it does, or
// it is a prefix of it.
func hasHTTPPrefix(b []byte) bool {
	const prefix = "HTTP/"
	n := min(len(b), len(prefix))
	return string(b[:n]) == prefix[:n]
}

// quoteStart returns at most the first 512 bytes of b, for error messages
// (the caller quotes them with %q).
func quoteStart(b []byte) []byte { return b[:min(len(b), 512)] }

// parseLength parses a Content-Length value: decimal digits, below 2^63.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// validToken reports whether b is a non-empty RFC 9110 token.
func validToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenByte(c) {
			return false
		}
	}
	return true
}

func tokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validValue reports whether b holds only visible characters, obs-text,
// spaces and tabs, as a header value must.
func validValue(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// asciiEqualFold reports whether b equals s ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
