package protocols

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/protocol-reference.md from the types")

// referenceFile is the protocol reference generated from types.go.
const referenceFile = "../docs/protocol-reference.md"

// enumerations are the allowed values of fields whose values are a closed
// set, from the same tables the validation uses.
func enumerations() map[string][]string {
	loads := slices.Sorted(maps.Keys(loadKinds))
	for i, k := range loads {
		if loadKinds[k] {
			loads[i] += " (measured)"
		} else {
			loads[i] += " (not measured)"
		}
	}
	return map[string][]string{
		"Server.kind":               slices.Sorted(maps.Keys(serverKinds)),
		"Load.kind":                 loads,
		"Load.client_start":         {"after-ready", "at-start"},
		"Capacity.on_non_monotonic": {"stop", "continue"},
		"Phase.kind":                slices.Sorted(maps.Keys(phaseKinds)),
		"Order.by":                  {"listed", "sha256", "shuffle", "alternate"},
		"Slot.port":                 {"a TCP port", "auto"},
	}
}

// shapes name the types that are written in a shape of their own.
var shapes = map[string]string{
	"Command":    "command: a list of arguments, or {shell: \"...\"}",
	"Need":       "a load name of the same cell, or {run: RUN-ID-TEMPLATE, as: NAME}",
	"Matrix":     "matrix: {AXIS: value or [values], include: [...], exclude: [...]}",
	"Order":      "\"listed\", or {by: sha256, key: T}, {by: shuffle, seed: N}, {by: alternate, axis: A, seed: N}",
	"SlotPort":   "a TCP port number, or auto",
	"CellFilter": "{AXIS: value or [values], ...}",
}

var defaultAfter = regexp.MustCompile(`(\S+) \(default\)`)

var defaultRe = regexp.MustCompile(`(?i)\bdefault(?: is|:)? ([^;,(]+)`)

// defaultQuoted is a value named before its "(default...)" note, as in
// `"phase-file" (default: what it means)`; defaultInParens the default
// inside the parentheses, as in `(default: the last)`.
var (
	defaultQuoted   = regexp.MustCompile(`("[^"]+") \(default\b`)
	defaultInParens = regexp.MustCompile(`\(default:? ([^)]+)\)`)
)

func typeName(e ast.Expr) (string, string) { // text, struct name to describe
	switch t := e.(type) {
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "text", ""
		case "int", "int64":
			return "whole number", ""
		case "float64":
			return "number", ""
		case "bool":
			return "true or false", ""
		}
		if s, ok := shapes[t.Name]; ok {
			return s, ""
		}
		return "[" + t.Name + "](#" + strings.ToLower(t.Name) + ")", t.Name
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.ArrayType:
		s, n := typeName(t.Elt)
		return "list of " + s, n
	case *ast.MapType:
		s, n := typeName(t.Value)
		return "mapping of names to " + s, n
	}
	return fmt.Sprintf("%T", e), ""
}

// reference writes the Markdown reference of every field reachable from
// Protocol, read from the declarations and comments of types.go.
func reference(t *testing.T) string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "types.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	structs := map[string]*ast.TypeSpec{}
	docs := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, sp := range g.Specs {
			ts, ok := sp.(*ast.TypeSpec)
			if !ok {
				continue
			}
			if _, ok := ts.Type.(*ast.StructType); ok {
				structs[ts.Name.Name] = ts
				docs[ts.Name.Name] = g.Doc.Text()
			}
		}
	}
	enums := enumerations()
	var b strings.Builder
	b.WriteString("# Protocol reference\n\n")
	b.WriteString("Generated from `protocols/types.go` by `go test ./protocols -run TestReference -update`; a test fails when it is out of date. ")
	b.WriteString("`docs/protocol.md` explains the format and `docs/tutorial.md` builds a protocol step by step. ")
	b.WriteString("Every field not marked required may be left out. Unknown fields are errors.\n")
	queue, seen := []string{"Protocol"}, map[string]bool{"Protocol": true}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		ts := structs[name]
		fmt.Fprintf(&b, "\n## %s\n\n", name)
		if doc := strings.TrimSpace(docs[name]); doc != "" {
			b.WriteString(strings.Join(strings.Fields(doc), " ") + "\n\n")
		}
		b.WriteString("| field | type | required | default | allowed values | description |\n|---|---|---|---|---|---|\n")
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			if fl.Tag == nil || len(fl.Names) == 0 {
				continue
			}
			tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`"))
			yname := strings.Split(tag.Get("yaml"), ",")[0]
			if yname == "" || yname == "-" {
				continue
			}
			typ, sub := typeName(fl.Type)
			if sub != "" && !seen[sub] && structs[sub] != nil {
				seen[sub] = true
				queue = append(queue, sub)
			}
			req := ""
			if tag.Get("warden") == "required" {
				req = "yes"
			}
			desc := strings.TrimSpace(strings.Join(strings.Fields(fl.Doc.Text()+" "+fl.Comment.Text()), " "))
			def := "–"
			if m := defaultQuoted.FindStringSubmatch(desc); m != nil {
				def = m[1]
			} else if m := defaultInParens.FindStringSubmatch(desc); m != nil {
				def = strings.TrimSpace(m[1])
			} else if m := defaultRe.FindStringSubmatch(desc); m != nil {
				def = strings.TrimSpace(strings.TrimSuffix(m[1], "."))
			} else if m := defaultAfter.FindStringSubmatch(desc); m != nil {
				def = m[1]
			}
			allowed := "–"
			if vs, ok := enums[name+"."+yname]; ok {
				allowed = strings.Join(vs, ", ")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", yname, typ, req, def, allowed, strings.ReplaceAll(desc, "|", "\\|"))
		}
	}
	// shapes, so every type named above is explained
	b.WriteString("\n## Shapes\n\n")
	keys := make([]string, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- **%s**: %s\n", k, shapes[k])
	}
	return b.String()
}

// TestReference keeps docs/protocol-reference.md equal to what the types
// say; -update rewrites it.
func TestReference(t *testing.T) {
	got := reference(t)
	if *update {
		if err := os.WriteFile(referenceFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referenceFile)
	if err != nil || string(want) != got {
		t.Fatalf("%s is out of date with types.go (%v); run: go test ./protocols -run TestReference -update", referenceFile, err)
	}
	// every field of every type reached is in it
	for _, typ := range []reflect.Type{reflect.TypeFor[Protocol](), reflect.TypeFor[Load](), reflect.TypeFor[Server](), reflect.TypeFor[Phase](), reflect.TypeFor[Slot]()} {
		for i := range typ.NumField() {
			if y := strings.Split(typ.Field(i).Tag.Get("yaml"), ",")[0]; y != "" && y != "-" && !strings.Contains(got, "| `"+y+"` |") {
				t.Errorf("field %s.%s (%s) is not in the reference", typ.Name(), typ.Field(i).Name, y)
			}
		}
	}
}

// TestTutorialProtocol: the last YAML block of docs/tutorial.md, the
// whole protocol, is valid and expands to the 2x2 matrix it describes,
// each moderate run after the saturation run it needs.
func TestTutorialProtocol(t *testing.T) {
	b, err := os.ReadFile("../docs/tutorial.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) == 0 {
		t.Fatal("no YAML block in the tutorial")
	}
	p, err := PlanBytes("tutorial.yaml", []byte(blocks[len(blocks)-1][1]), Options{})
	if err != nil {
		t.Fatalf("the tutorial's protocol: %v", err)
	}
	pos := map[string]int{}
	for i, r := range p.Runs {
		pos[r.ID] = i
	}
	if len(p.Runs) != 8 {
		t.Fatalf("%d runs, want 8", len(p.Runs))
	}
	for _, cell := range []string{"short.base", "short.small", "long.base", "long.small"} {
		sat, ok1 := pos[cell+".sat"]
		mod, ok2 := pos[cell+".mod"]
		if !ok1 || !ok2 || mod < sat || p.Runs[mod].NeedVars["NEED_SAT_DIR"] != cell+".sat" {
			t.Errorf("cell %s: runs %v", cell, pos)
		}
	}
}
