package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	yamlv2 "go.yaml.in/yaml/v2"
)

// MaxDocumentBytes bounds one file of a file_sd source and one answer of
// an HTTP SD server: room for a million targets with two labels each. A
// larger one is refused (the source fails and keeps the targets it gave
// last). Prometheus reads them whole, of any size; sonde reads JSON as a
// stream of groups into compact storage, so what it keeps is what the
// targets need, and the cap bounds what one hostile group (a label value of
// a gigabyte) can make it hold while it is read.
const MaxDocumentBytes = 128 << 20

// MaxYAMLDocumentBytes bounds a YAML file of a file_sd source. YAML is
// decoded whole, as Prometheus decodes it, and that costs about thirty times
// the file (a 13 MB file of 200,000 groups, 360 MB of heap): JSON, read as
// a stream, is the format for large files.
const MaxYAMLDocumentBytes = 8 << 20

// ErrTooLarge is returned (wrapped, with the cap) for a file or an answer
// larger than MaxDocumentBytes.
var ErrTooLarge = errors.New("larger than the limit")

// docGroup is one target group of a file or HTTP SD document, as
// Prometheus's own format has it.
type docGroup struct {
	Targets []string          `json:"targets" yaml:"targets"`
	Labels  map[string]string `json:"labels" yaml:"labels"`
}

// cappedReader reads at most max bytes from r, and fails with ErrTooLarge
// when r holds more.
type cappedReader struct {
	r    io.Reader
	left int64 // bytes that may still be read, plus the one that tells there are more
	max  int64
}

func newCappedReader(r io.Reader, max int64) *cappedReader {
	return &cappedReader{r: r, left: max + 1, max: max}
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("%w of %d bytes", ErrTooLarge, c.max)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left <= 0 {
		return n - 1, fmt.Errorf("%w of %d bytes", ErrTooLarge, c.max)
	}
	return n, err
}

// readJSON reads a JSON array of target groups from r, one group at a time,
// into a chunk with over set on every group. It refuses what Prometheus's
// decoder refuses: unknown fields, invalid label names, null groups.
func readJSON(r io.Reader, over labels.Labels) (*chunk, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	var b chunkBuilder
	if tok == nil { // a document of "null" has no groups
		return b.chunk(over), trailing(dec)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("want a JSON array of target groups, not %v", tok)
	}
	for i := 0; dec.More(); i++ {
		var g *docGroup
		if err := dec.Decode(&g); err != nil {
			return nil, fmt.Errorf("group %d: %w", i, jsonErr(err))
		}
		if err := addDocGroup(&b, g, i); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, jsonErr(err)
	}
	return b.chunk(over), trailing(dec)
}

// trailing refuses anything but white space after the document.
func trailing(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return errors.New("data after the array of target groups")
		}
		return jsonErr(err)
	}
	return nil
}

// jsonErr says that a document ended early instead of "unexpected EOF".
func jsonErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("the document ends before the array of target groups does")
	}
	return err
}

// readYAML reads a YAML list of target groups, decoded whole as Prometheus
// decodes it, into a chunk with over set on every group.
func readYAML(data []byte, over labels.Labels) (*chunk, error) {
	var gs []*docGroup
	if err := yamlv2.UnmarshalStrict(data, &gs); err != nil {
		return nil, err
	}
	var b chunkBuilder
	for i, g := range gs {
		if err := addDocGroup(&b, g, i); err != nil {
			return nil, err
		}
	}
	return b.chunk(over), nil
}

// addDocGroup checks group i of a document and writes it.
func addDocGroup(b *chunkBuilder, g *docGroup, i int) error {
	if g == nil {
		return fmt.Errorf("group %d is null", i)
	}
	for n := range g.Labels {
		if !model.UTF8Validation.IsValidLabelName(n) {
			return fmt.Errorf("group %d: %q is not a valid label name", i, n)
		}
	}
	b.addressGroup(g.Labels, g.Targets)
	return nil
}
