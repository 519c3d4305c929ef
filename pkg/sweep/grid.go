package sweep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// param is one server argument of a configuration: a key as the grid or
// the parameter file names it, and its value.
type param struct {
	key     string // without leading dashes, as given
	value   string // the value as text; unused for a boolean
	boolean *bool  // a boolean value: the flag alone (true) or its --no- form (false)
}

// cliKey is the key as a command-line flag name without dashes, as vllm
// bench sweep spells it: underscores become hyphens, except after a dot
// (an inner configuration field, which vLLM's CLI does not convert).
func (p param) cliKey() string {
	head, rest, dotted := strings.Cut(p.key, ".")
	head = strings.ReplaceAll(head, "_", "-")
	if dotted {
		return head + "." + rest
	}
	return head
}

// args are the server arguments of the parameter: --key value; for a
// boolean --key or --no-key, and --key=true or --key=false for a dotted
// key (vllm bench sweep's rule, param_sweep.py _normalize_cmd_kv_pair).
func (p param) args() []string {
	k := p.cliKey()
	if p.boolean == nil {
		return []string{"--" + k, p.value}
	}
	switch {
	case strings.Contains(k, "."):
		return []string{"--" + k + "=" + strconv.FormatBool(*p.boolean)}
	case *p.boolean:
		return []string{"--" + k}
	}
	return []string{"--no-" + k}
}

// text is the parameter as key=value.
func (p param) text() string {
	if p.boolean != nil {
		return p.cliKey() + "=" + strconv.FormatBool(*p.boolean)
	}
	return p.cliKey() + "=" + p.value
}

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// idPart is the parameter's part of a configuration id: key-value, a
// boolean as key or no-key, with anything but letters, digits, '.' and
// '-' turned into '-'.
func (p param) idPart() string {
	k := idUnsafe.ReplaceAllString(p.cliKey(), "-")
	if p.boolean != nil {
		if *p.boolean {
			return k
		}
		return "no-" + k
	}
	return k + "-" + idUnsafe.ReplaceAllString(p.value, "-")
}

var gridKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// parseGrid reads the --grid flags, KEY=V1,V2,..., into the product of
// their values: the first key varies slowest, as itertools.product
// orders a grid. The values true and false are booleans.
func parseGrid(grid []string) ([][]param, error) {
	combos := [][]param{nil}
	seen := map[string]string{}
	for _, g := range grid {
		key, values, ok := strings.Cut(g, "=")
		key = strings.TrimLeft(key, "-")
		if !ok || !gridKey.MatchString(key) {
			return nil, flagErr("grid", "%q: want KEY=V1,V2,... (KEY a server flag without its dashes, such as max-num-seqs)", g)
		}
		norm := param{key: key}.cliKey()
		if prev, dup := seen[norm]; dup {
			return nil, flagErr("grid", "%s is given twice (%q and %q): give every value of a key in one --grid", norm, prev, g)
		}
		seen[norm] = g
		var ps []param
		vals := map[string]bool{}
		for _, v := range strings.Split(values, ",") {
			if v == "" {
				return nil, flagErr("grid", "%q: an empty value (values are separated by commas; a value with a comma goes in --serve-params)", g)
			}
			if vals[v] {
				return nil, flagErr("grid", "%q: the value %s is given twice", g, v)
			}
			vals[v] = true
			p := param{key: key, value: v}
			if v == "true" || v == "false" {
				b := v == "true"
				p = param{key: key, boolean: &b}
			}
			ps = append(ps, p)
		}
		var next [][]param
		for _, c := range combos {
			for _, p := range ps {
				next = append(next, append(append([]param(nil), c...), p))
			}
		}
		combos = next
	}
	return combos, nil
}

// namedCombo is one combination of --serve-params, with the name its
// record gives (_benchmark_name), if any.
type namedCombo struct {
	name   string
	params []param
}

// parseServeParams reads vllm bench sweep's --serve-params file: a JSON
// list of objects, each one combination of parameters, or an object of
// named combinations (each name its _benchmark_name); key order is kept.
// A value is a string, a number or a boolean; an object is passed as its
// JSON text, as vllm bench sweep does (param_sweep.py apply_to_cmd).
func parseServeParams(path string) ([]namedCombo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, flagErr("serve-params", "%v", err)
	}
	fail := func(format string, a ...any) error {
		return flagErr("serve-params", "%s: %s", path, fmt.Sprintf(format, a...))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fail("not JSON: %v", err)
	}
	var combos []namedCombo
	switch tok {
	case json.Delim('['):
		for dec.More() {
			c, err := readCombo(dec)
			if err != nil {
				return nil, fail("combination %d: %v", len(combos)+1, err)
			}
			combos = append(combos, c)
		}
	case json.Delim('{'):
		for dec.More() {
			kt, _ := dec.Token()
			name, _ := kt.(string)
			c, err := readCombo(dec)
			if err != nil {
				return nil, fail("combination %q: %v", name, err)
			}
			if c.name != "" && c.name != name {
				return nil, fail("combination %q names itself %q", name, c.name)
			}
			c.name = name
			combos = append(combos, c)
		}
	default:
		return nil, fail("want a list of parameter combinations, or an object of named ones")
	}
	if _, err := dec.Token(); err != nil {
		return nil, fail("not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fail("more after the combinations")
	}
	if len(combos) == 0 {
		return nil, fail("no combinations")
	}
	seen := map[string]bool{}
	for _, c := range combos {
		if c.name == "" {
			continue
		}
		if seen[c.name] {
			return nil, fail("the name %q is given twice", c.name)
		}
		seen[c.name] = true
	}
	return combos, nil
}

// readCombo reads one JSON object of parameters.
func readCombo(dec *json.Decoder) (namedCombo, error) {
	var c namedCombo
	tok, err := dec.Token()
	if err != nil {
		return c, err
	}
	if tok != json.Delim('{') {
		return c, fmt.Errorf("want an object of parameters, got %v", tok)
	}
	keys := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return c, err
		}
		key := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return c, err
		}
		if key == "_benchmark_name" {
			if err := json.Unmarshal(raw, &c.name); err != nil || c.name == "" {
				return c, errors.New("_benchmark_name must be a non-empty string")
			}
			continue
		}
		k := strings.TrimLeft(key, "-")
		if !gridKey.MatchString(k) {
			return c, fmt.Errorf("key %q is not a server flag name", key)
		}
		norm := param{key: k}.cliKey()
		if keys[norm] {
			return c, fmt.Errorf("%s is given twice", norm)
		}
		keys[norm] = true
		p := param{key: k}
		switch raw[0] {
		case '"':
			json.Unmarshal(raw, &p.value)
		case 't', 'f':
			b := raw[0] == 't'
			p.boolean = &b
		case '{':
			var buf bytes.Buffer
			json.Compact(&buf, raw)
			p.value = buf.String()
		case 'n':
			return c, fmt.Errorf("%s is null: leave it out for the server's default", key)
		case '[':
			return c, fmt.Errorf("%s is a list, which is no server argument", key)
		default:
			p.value = string(raw)
		}
		c.params = append(c.params, p)
	}
	_, err = dec.Token()
	return c, err
}
