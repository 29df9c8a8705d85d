package web

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// WriteJSON answers with v as indented JSON.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// StreamList writes {"NAME":[items...],tail...} to w, encoding each item as
// each calls emit, through a buffer: memory stays O(buffer) whatever the
// list's length. tail is called after the list with the encoder of the
// object's other fields.
func StreamList(w http.ResponseWriter, name string, each func(emit func(v any) error) error, tail func(field func(name string, v any) error) error) {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	fmt.Fprintf(bw, "{%q:[", name)
	n := 0
	emit := func(v any) error {
		sep := "\n"
		if n > 0 {
			sep = ","
		}
		n++
		if _, err := io.WriteString(bw, sep); err != nil {
			return err
		}
		return enc.Encode(v)
	}
	if each(emit) != nil {
		return // the client went away; nothing to do
	}
	bw.WriteString("]")
	field := func(name string, v any) error {
		fmt.Fprintf(bw, ",%q:", name)
		return enc.Encode(v)
	}
	if tail(field) != nil {
		return
	}
	bw.WriteString("}\n")
	_ = bw.Flush()
}

// WantsStream reports whether r asks for Server-Sent Events.
func WantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}
