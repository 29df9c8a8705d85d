package http

import (
	"bytes"
	"fmt"

	"github.com/sondeprobe/sonde/probe"
)

// wireRequest is a check's request as the bytes it sends, built once by
// net/http's own writer so that both probe paths send the same request:
// the bytes before the Host value, and those after it. When the Host header
// does not depend on the target, full is the whole request.
type wireRequest struct {
	prefix, suffix []byte
	full           []byte // nil when the Host header depends on the target
}

// hostPlaceholder stands for the Host value while the request is written.
const hostPlaceholder = "sonde-host-placeholder.invalid"

// newWireRequest writes p's request with a placeholder Host and cuts it
// around the placeholder.
func newWireRequest(p *Prober) (wireRequest, error) {
	var buf bytes.Buffer
	if err := p.request(hostPlaceholder).Write(&buf); err != nil {
		return wireRequest{}, fmt.Errorf("build request: %w", err)
	}
	b := buf.Bytes()
	mark := []byte("\r\nHost: " + hostPlaceholder + "\r\n")
	i := bytes.Index(b, mark)
	if i < 0 {
		return wireRequest{}, fmt.Errorf("build request: no Host header in %q", b)
	}
	at := i + len("\r\nHost: ")
	w := wireRequest{
		prefix: bytes.Clone(b[:at]),
		suffix: bytes.Clone(b[at+len(hostPlaceholder):]),
	}
	if p.opts.Host != "" {
		w.full = w.append(nil, []byte(p.opts.Host))
	}
	return w, nil
}

// append appends the request with Host value host to dst.
func (w *wireRequest) append(dst, host []byte) []byte {
	dst = append(dst, w.prefix...)
	dst = append(dst, host...)
	return append(dst, w.suffix...)
}

// appendFor appends the request for target t of prober p to dst.
func (w *wireRequest) appendFor(dst []byte, p *Prober, t probe.Target) []byte {
	dst = append(dst, w.prefix...)
	dst = p.appendHost(dst, t)
	return append(dst, w.suffix...)
}
