package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxAliasNodes bounds the nodes visited through YAML aliases, so that a
// small file cannot expand into a huge one ("billion laughs").
const maxAliasNodes = 100000

// maxDepth bounds the nesting the decoder follows.
const maxDepth = 32

// decodeFile decodes one YAML document into a File. Unknown fields, duplicate
// keys, values of the wrong type and bad durations are errors that name the
// field's path, in file order; the first one is returned.
func decodeFile(data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fieldErr("config", "the file is empty")
		}
		return nil, &FieldError{Field: "config", Msg: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fieldErr("config", "the file holds more than one YAML document")
	}
	f := new(File)
	d := &decoder{}
	doc := &root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, fieldErr("config", "the file is empty")
		}
		doc = doc.Content[0]
	}
	if isNull(doc) {
		return nil, fieldErr("config", "the file is empty")
	}
	if err := d.decode(doc, "", reflect.ValueOf(f).Elem(), 0); err != nil {
		return nil, err
	}
	return f, nil
}

// decoder walks a yaml.Node tree into Go values by their yaml tags.
type decoder struct {
	aliasNodes int // nodes visited below an alias
	inAlias    int // depth of aliases being followed
}

var (
	durationType = reflect.TypeFor[Duration]()
	nodeType     = reflect.TypeFor[yaml.Node]()
)

// join appends a key to a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// kindName describes a node for "expected X, got Y" messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decode stores node n into v, whose field path is path.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value, depth int) error {
	if depth > maxDepth {
		return fieldErr(path, "nested too deeply")
	}
	if n.Kind == yaml.AliasNode {
		d.inAlias++
		defer func() { d.inAlias-- }()
		return d.decode(n.Alias, path, v, depth+1)
	}
	if d.inAlias > 0 {
		if d.aliasNodes++; d.aliasNodes > maxAliasNodes {
			return fieldErr(path, "YAML aliases expand to more than %d nodes", maxAliasNodes)
		}
	}
	if v.Kind() == reflect.Pointer {
		if isNull(n) {
			return nil // not set
		}
		p := reflect.New(v.Type().Elem())
		if err := d.decode(n, path, p.Elem(), depth+1); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	if v.Type() == durationType {
		return decodeDuration(n, path, v)
	}
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(*n)) // decoded by its owner's types (see sd.go)
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		return d.decodeStruct(n, path, v, depth)
	case reflect.Map:
		return d.decodeMap(n, path, v, depth)
	case reflect.Slice:
		return d.decodeSlice(n, path, v, depth)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || isNull(n) {
			return fieldErr(path, "expected a string, got %s", kindName(n))
		}
		v.SetString(n.Value)
		return nil
	case reflect.Int:
		var i int
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			return fieldErr(path, "expected an integer, got %s", kindName(n))
		}
		v.SetInt(int64(i))
		return nil
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			return fieldErr(path, "expected true or false, got %s", kindName(n))
		}
		v.SetBool(b)
		return nil
	}
	return fmt.Errorf("config: cannot decode into %s", v.Type()) // a bug in the File types
}

// decodeDuration decodes a duration with [ParseDuration].
func decodeDuration(n *yaml.Node, path string, v reflect.Value) error {
	if n.Kind != yaml.ScalarNode {
		return fieldErr(path, "expected a duration such as \"5s\", got %s", kindName(n))
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		return &FieldError{Field: path, Msg: err.Error()}
	}
	v.SetInt(int64(d))
	return nil
}

// yamlKey returns the key a struct field is read from.
func yamlKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value, depth int) error {
	if n.Kind != yaml.MappingNode {
		return fieldErr(orRoot(path), "expected a mapping, got %s", kindName(n))
	}
	t := v.Type()
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fieldErr(orRoot(path), "expected a field name, got %s", kindName(k))
		}
		if k.Value == "<<" {
			return fieldErr(join(path, k.Value), "YAML merge keys are not supported")
		}
		if k.Value == "" {
			return fieldErr(orRoot(path), "line %d column %d: empty key; want a field name", k.Line, k.Column)
		}
		field := join(path, k.Value)
		if seen[k.Value] {
			return fieldErr(field, "set more than once")
		}
		seen[k.Value] = true
		idx := -1
		for j := 0; j < t.NumField(); j++ {
			if yamlKey(t.Field(j)) == k.Value {
				idx = j
				break
			}
		}
		if idx < 0 {
			if strings.HasSuffix(k.Value, "_sd_configs") {
				return fieldErr(field, "unknown field; the discovery sonde supports is %s", sdKeyList())
			}
			return fieldErr(field, "unknown field")
		}
		if err := d.decode(val, field, v.Field(idx), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// orRoot names the document root in messages.
func orRoot(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

func (d *decoder) decodeMap(n *yaml.Node, path string, v reflect.Value, depth int) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fieldErr(path, "expected a mapping, got %s", kindName(n))
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			return fieldErr(path, "expected a name, got %s", kindName(k))
		}
		if k.Value == "" {
			return fieldErr(path, "line %d column %d: empty key; want a name", k.Line, k.Column)
		}
		field := join(path, k.Value)
		key := reflect.ValueOf(k.Value)
		if m.MapIndex(key).IsValid() {
			return fieldErr(field, "defined more than once")
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		if err := d.decode(val, field, elem, depth+1); err != nil {
			return err
		}
		m.SetMapIndex(key, elem)
	}
	v.Set(m)
	return nil
}

func (d *decoder) decodeSlice(n *yaml.Node, path string, v reflect.Value, depth int) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return fieldErr(path, "expected a list, got %s", kindName(n))
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		if err := d.decode(item, fmt.Sprintf("%s[%d]", path, i), s.Index(i), depth+1); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}
