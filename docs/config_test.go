package docs

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config"
)

// configDoc is the configuration reference.
const configDoc = "configuration.md"

// fieldRow is a row of a field table of configuration.md: its first cell is
// a field's path, in backquotes.
var fieldRow = regexp.MustCompile("^\\| `((?:checks|pools|remediation|metrics|webhooks)[a-zA-Z0-9_.\\[\\]]*)` \\|")

// schemaFields returns the path of every field of the configuration file, as
// the decoder reads it: by reflection over config.File and the yaml keys of
// its structs, the way config's decoder finds a key's field. A map of
// structs adds ".NAME" (checks.NAME.interval), a list of structs "[]"
// (pools[].name). Values the decoder hands on whole (a map of strings, a
// YAML node such as a discovery list) are leaves.
func schemaFields() []string {
	var paths []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			path := prefix + name
			paths = append(paths, path)
			ft := f.Type
			suffix := ""
			for {
				switch ft.Kind() {
				case reflect.Pointer:
					ft = ft.Elem()
					continue
				case reflect.Slice:
					suffix += "[]"
					ft = ft.Elem()
					continue
				case reflect.Map:
					suffix += ".NAME"
					ft = ft.Elem()
					continue
				}
				break
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeFor[config.File]().PkgPath() {
				walk(ft, path+suffix+".")
			}
		}
	}
	walk(reflect.TypeFor[config.File](), "")
	return paths
}

// documentedFields returns the field paths of configuration.md's tables,
// each once, in document order.
func documentedFields(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for line := range strings.Lines(string(b)) {
		m := fieldRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if slices.Contains(paths, m[1]) {
			t.Errorf("%s documents %s twice", configDoc, m[1])
			continue
		}
		paths = append(paths, m[1])
	}
	return paths
}

// TestConfigReferenceComplete fails when a field of the configuration file
// is missing from configuration.md, or when configuration.md documents a
// field the file does not have.
func TestConfigReferenceComplete(t *testing.T) {
	schema := schemaFields()
	if len(schema) < 60 {
		t.Fatalf("found %d fields by reflection over config.File, want them all: %v", len(schema), schema)
	}
	documented := documentedFields(t)
	for _, p := range schema {
		if !slices.Contains(documented, p) {
			t.Errorf("%s: a field of the configuration file, missing from the tables of %s", p, configDoc)
		}
	}
	for _, p := range documented {
		if !slices.Contains(schema, p) {
			t.Errorf("%s: documented in %s, not a field of the configuration file", p, configDoc)
		}
	}
}
