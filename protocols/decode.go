package protocols

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Strict decoding. yaml.v3 parses the file into its node tree; this decoder
// then walks the tree into the protocol types. It is as strict as yaml.v3's
// KnownFields decoding (unknown and duplicate keys are errors) and stricter
// about types, and because it walks the tree itself it can name the path of
// every field it rejects and report every problem, not only the first.

// Meta records where a mapping and each of its keys' values sit in the
// file, so later checks can point at the line an operator must edit.
type Meta struct {
	Pos    Pos
	Fields map[string]Pos
}

// At returns the position of field's value, or of the mapping when the
// field is absent.
func (m Meta) At(field string) Pos {
	if p, ok := m.Fields[field]; ok {
		return p
	}
	return m.Pos
}

// nodeDecoder is implemented by types with a shape of their own (a
// command that is either a list or {shell: ...}, a need that is a string or
// a mapping, a matrix).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

// maxNodes bounds the work of one decode, so aliases cannot make a small
// file expand without limit.
const maxNodes = 200000

type decoder struct {
	c       *collector
	visited int
}

var (
	metaType        = reflect.TypeFor[Meta]()
	nodeDecoderType = reflect.TypeFor[nodeDecoder]()
)

func posOf(n *yaml.Node) Pos { return Pos{Line: n.Line, Column: n.Column} }

// resolve follows aliases and counts the nodes walked.
func (d *decoder) resolve(n *yaml.Node) (*yaml.Node, bool) {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 32 || n.Alias == nil {
			d.c.add(posOf(n), "", "alias cannot be resolved")
			return nil, false
		}
		n = n.Alias
	}
	d.visited++
	if d.visited > maxNodes {
		if d.visited == maxNodes+1 {
			d.c.add(posOf(n), "", "document is too large after expanding aliases (more than %d nodes)", maxNodes)
		}
		return nil, false
	}
	return n, n != nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing (null)"
		case "!!int":
			return "the number " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "an unexpected node"
}

// pairs returns the key/value pairs of a mapping, reporting non-scalar,
// merge and duplicate keys.
func (d *decoder) pairs(n *yaml.Node, path string) [][2]*yaml.Node {
	seen := map[string]int{}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, ok := d.resolve(n.Content[i])
		if !ok {
			continue
		}
		v := n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.c.add(posOf(k), path, "a key must be a plain name, not %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.c.add(posOf(k), path, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.c.add(posOf(k), join(path, k.Value), "duplicate key %q (first given at line %d)", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

type fieldInfo struct {
	index    int
	name     string
	required bool
}

func structFields(t reflect.Type) (fields []fieldInfo, meta int) {
	meta = -1
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type == metaType {
			meta = i
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		fields = append(fields, fieldInfo{index: i, name: name, required: f.Tag.Get("warden") == "required"})
	}
	return fields, meta
}

// decode decodes n into v, which must be settable.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n, ok := d.resolve(n)
	if !ok {
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(nodeDecoderType) {
		v.Addr().Interface().(nodeDecoder).decodeNode(d, n, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
			return
		}
		p := reflect.New(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.c.add(posOf(n), path, "expected a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.c.add(posOf(n), path, "expected a mapping of names to values, got %s", kindName(n))
			return
		}
		m := reflect.MakeMap(v.Type())
		for _, kv := range d.pairs(n, path) {
			val := reflect.New(v.Type().Elem()).Elem()
			d.decode(kv[1], val, join(path, kv[0].Value))
			m.SetMapIndex(reflect.ValueOf(kv[0].Value).Convert(v.Type().Key()), val)
		}
		v.Set(m)
	case reflect.String:
		if s, ok := d.scalarString(n, path); ok {
			v.SetString(s)
		}
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			d.c.add(posOf(n), path, "expected a whole number, got %s", kindName(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			d.c.add(posOf(n), path, "number %s is out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			d.c.add(posOf(n), path, "expected a number, got %s", kindName(n))
			return
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.c.add(posOf(n), path, "expected a finite number, got %s", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.c.add(posOf(n), path, "expected true or false, got %s", kindName(n))
			return
		}
		v.SetBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	default:
		d.c.add(posOf(n), path, "internal: cannot decode into %s", v.Type())
	}
}

// scalarString accepts any non-null scalar as text: "TP: 1" means "1".
func (d *decoder) scalarString(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		d.c.add(posOf(n), path, "expected text, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

// eachString calls fn with the text of every item of the sequence n and
// the item's node: an alias is resolved first, and an item that cannot
// be resolved or is not text is reported as resolve and scalarString
// report it, and skipped.
func (d *decoder) eachString(n *yaml.Node, path string, fn func(s string, item *yaml.Node)) {
	for i, item := range n.Content {
		item, ok := d.resolve(item)
		if !ok {
			continue
		}
		if s, ok := d.scalarString(item, joinIndex(path, i)); ok {
			fn(s, item)
		}
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	what := path
	if what == "" {
		what = "the protocol"
	}
	if n.Kind != yaml.MappingNode {
		d.c.add(posOf(n), path, "expected a mapping, got %s", kindName(n))
		return
	}
	fields, metaIdx := structFields(v.Type())
	meta := Meta{Pos: posOf(n), Fields: map[string]Pos{}}
	got := map[string]bool{}
	for _, kv := range d.pairs(n, path) {
		k := kv[0]
		var f *fieldInfo
		for i := range fields {
			if fields[i].name == k.Value {
				f = &fields[i]
				break
			}
		}
		if f == nil {
			if why, ok := removedFields[v.Type().Name()+"."+k.Value]; ok {
				d.c.add(posOf(k), join(path, k.Value), "%s", why)
				continue
			}
			d.c.add(posOf(k), join(path, k.Value), "unknown field %q in %s (known fields: %s)", k.Value, what, knownList(fields))
			continue
		}
		got[f.name] = true
		before := len(d.c.list) + d.c.extra
		d.decode(kv[1], v.Field(f.index), join(path, f.name))
		if len(d.c.list)+d.c.extra == before {
			// only a field that decoded cleanly counts as given, so later
			// checks do not pile a second complaint on a wrong type
			meta.Fields[f.name] = posOf(kv[1])
		}
	}
	for _, f := range fields {
		if f.required && !got[f.name] {
			d.c.add(posOf(n), join(path, f.name), "required field %q is missing from %s", f.name, what)
		}
	}
	if metaIdx >= 0 {
		v.Field(metaIdx).Set(reflect.ValueOf(meta))
	}
}

func knownList(fields []fieldInfo) string {
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		names = append(names, f.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// removedFields are fields the format no longer has, by type and YAML
// name, with what to do instead: a protocol that still gives one is told
// why, not only that the field is unknown.
var removedFields = map[string]string{
	"AxisValue.prepare": "prepare steps are not part of the format: nothing would run them, and every input must exist before " +
		"controller start, which hashes the provenance files (the manifests among them) and refuses one that is missing. " +
		"Materialize the inputs first (e.g. loadgen materialize), list them under provenance:, then start",
}
