package discovery

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
)

// A chunk holds target groups that a source received at once — one file of
// a file_sd source, one HTTP SD answer, one group of a watch — with every
// label name and value in one string: a target costs the bytes of its
// labels and no allocation of its own, where Prometheus's groups cost two
// maps per group. A million targets of a file_sd file keep about 40 bytes
// each this way (see BenchmarkDiscoveredTargetMemory in package server).
//
// data is a sequence of groups. A group is its label set, then the number
// of its targets, then each target's label set. A label set is the number
// of its labels, then for each label the index of its name in names, the
// length of its value and the value. Numbers are unsigned varints.
//
// A chunk is never changed once built, so the strings read from it are
// shared, not copied. Labels are written in the order of their names, so
// that the same groups make the same chunk.
type chunk struct {
	data    string
	names   []string
	over    labels.Labels // labels set on every group, over its own (__meta_filepath, __meta_url)
	groups  int
	targets int
}

// label is a label read from a chunk; its strings share the chunk's data.
type label struct{ name, value string }

// each calls fn for every target of the chunk, in order, with its group's
// labels and its own. The slices are reused from one call to the next. It
// stops when fn returns false.
func (c *chunk) each(fn func(group, target []label) bool) {
	r := chunkReader{c: c}
	var gl, tl []label
	for range c.groups {
		gl = r.set(gl[:0])
		n := r.uvarint()
		for range n {
			tl = r.set(tl[:0])
			if !fn(gl, tl) {
				return
			}
		}
	}
}

// chunkReader reads a chunk's data from the start.
type chunkReader struct {
	c   *chunk
	pos int
}

func (r *chunkReader) uvarint() int {
	v, n := uvarintString(r.c.data[r.pos:])
	r.pos += n
	return int(v)
}

// set appends the label set at the reader's position to ls.
func (r *chunkReader) set(ls []label) []label {
	n := r.uvarint()
	for range n {
		name := r.c.names[r.uvarint()]
		l := r.uvarint()
		ls = append(ls, label{name, r.c.data[r.pos : r.pos+l]})
		r.pos += l
	}
	return ls
}

// uvarintString decodes an unsigned varint at the start of s, as
// binary.Uvarint does for a byte slice. The chunk builder wrote it, so it
// is well formed.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x80 {
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return x, len(s)
}

// chunkBuilder builds a chunk. Groups are written whole: [chunkBuilder.set]
// and [chunkBuilder.label] for the group's labels, [chunkBuilder.count]
// for its number of targets, then a set for each target.
type chunkBuilder struct {
	b       strings.Builder
	names   map[string]uint32
	list    []string
	groups  int
	targets int
	scratch [binary.MaxVarintLen64]byte
}

func (b *chunkBuilder) uvarint(v int) {
	n := binary.PutUvarint(b.scratch[:], uint64(v))
	b.b.Write(b.scratch[:n])
}

// set starts a label set of n labels.
func (b *chunkBuilder) set(n int) { b.uvarint(n) }

// label writes one label of the set being written.
func (b *chunkBuilder) label(name, value string) {
	i, ok := b.names[name]
	if !ok {
		if b.names == nil {
			b.names = map[string]uint32{}
		}
		i = uint32(len(b.list))
		b.names[name] = i
		b.list = append(b.list, name)
	}
	b.uvarint(int(i))
	b.uvarint(len(value))
	b.b.WriteString(value)
}

// count ends a group's labels: n targets follow.
func (b *chunkBuilder) count(n int) {
	b.uvarint(n)
	b.groups++
	b.targets += n
}

// group writes a group given as Prometheus's label sets.
func (b *chunkBuilder) group(g *targetgroup.Group) {
	b.labelSet(g.Labels)
	b.count(len(g.Targets))
	for _, t := range g.Targets {
		b.labelSet(t)
	}
}

func (b *chunkBuilder) labelSet(ls model.LabelSet) {
	b.set(len(ls))
	for _, n := range slices.Sorted(maps.Keys(ls)) {
		b.label(string(n), string(ls[n]))
	}
}

// addressGroup writes a group of targets given by address only, as file
// and HTTP SD documents give them.
func (b *chunkBuilder) addressGroup(ls map[string]string, targets []string) {
	b.set(len(ls))
	for _, n := range slices.Sorted(maps.Keys(ls)) {
		b.label(n, ls[n])
	}
	b.count(len(targets))
	for _, t := range targets {
		b.set(1)
		b.label(model.AddressLabel, t)
	}
}

// chunk returns the chunk built, with over set on every group. The data
// is copied to its size when the builder's buffer has more than an eighth
// of room left: a chunk is kept for long.
func (b *chunkBuilder) chunk(over labels.Labels) *chunk {
	data := b.b.String()
	if b.b.Cap()-len(data) > len(data)/8 {
		data = strings.Clone(data)
	}
	return &chunk{data: data, names: b.list, over: over, groups: b.groups, targets: b.targets}
}

// equal reports whether two chunks hold the same groups. Labels are
// written in the order of their names, so the same document gives the
// same chunk.
func (c *chunk) equal(d *chunk) bool {
	return c.data == d.data && slices.Equal(c.names, d.names) && labels.Equal(c.over, d.over)
}

// chunkOf returns a chunk holding Prometheus's group g.
func chunkOf(g *targetgroup.Group) *chunk {
	var b chunkBuilder
	b.group(g)
	return b.chunk(labels.EmptyLabels())
}
