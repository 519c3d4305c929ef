package amend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// One argv token changed, and amend printed the whole server object for
// each of twelve runs. The diff is read here field by field, down to the
// leaves (server.command.argv[5]), and each change once, with the runs it
// touches.

// Change is one leaf of the plan an amendment changes, old and new as
// JSON, and the runs whose field it is (none for a field of the
// protocol's own or of the totals).
type Change struct {
	Field string          `json:"field"`
	Old   json.RawMessage `json:"old"`
	New   json.RawMessage `json:"new"`
	Runs  []string        `json:"runs,omitempty"`
}

// Changes are the diff's changes down to the leaves, each once: the
// runs' changes grouped by field, old and new value (in the order the
// runs first show them), then the protocol's fields, then the totals.
func (d Diff) Changes() []Change {
	var out []Change
	at := map[string]int{}
	for _, rc := range d.Changed {
		for _, f := range rc.Fields {
			for _, l := range leaves(f) {
				k := l.Field + "\x00" + string(l.Old) + "\x00" + string(l.New)
				if i, ok := at[k]; ok {
					out[i].Runs = append(out[i].Runs, rc.Run)
					continue
				}
				at[k] = len(out)
				out = append(out, Change{Field: l.Field, Old: l.Old, New: l.New, Runs: []string{rc.Run}})
			}
		}
	}
	for _, f := range append(append([]FieldDiff{}, d.Fields...), d.Totals...) {
		for _, l := range leaves(f) {
			out = append(out, Change{Field: l.Field, Old: l.Old, New: l.New})
		}
	}
	return out
}

// leaves splits a changed field into the leaves that changed in it:
// objects key by key, lists of the same length item by item; a list
// whose length changed is one change.
func leaves(f FieldDiff) []FieldDiff {
	var a, b any
	if decode(f.Old, &a) != nil || decode(f.New, &b) != nil {
		return []FieldDiff{f}
	}
	var out []FieldDiff
	walkDiff(f.Field, a, b, &out)
	if len(out) == 0 {
		return []FieldDiff{f} // equal once decoded: as recorded
	}
	return out
}

func decode(raw json.RawMessage, v *any) error {
	if len(raw) == 0 {
		*v = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func walkDiff(path string, a, b any, out *[]FieldDiff) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(x)+len(y))
			for k := range x {
				keys = append(keys, k)
			}
			for k := range y {
				if _, in := x[k]; !in {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				walkDiff(join(k), x[k], y[k], out)
			}
			return
		}
	case []any:
		if y, ok := b.([]any); ok && len(x) == len(y) {
			for i := range x {
				walkDiff(path+"["+strconv.Itoa(i)+"]", x[i], y[i], out)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		ob, _ := json.Marshal(a)
		nb, _ := json.Marshal(b)
		*out = append(*out, FieldDiff{Field: path, Old: ob, New: nb})
	}
}

// runsNamed names the runs a change touches: all of them up to eight,
// else the first six and how many more.
func runsNamed(runs []string) string {
	switch {
	case len(runs) == 1:
		return "run " + runs[0]
	case len(runs) <= 8:
		return fmt.Sprintf("%d runs: %s", len(runs), strings.Join(runs, ", "))
	}
	return fmt.Sprintf("%d runs: %s and %d more", len(runs), strings.Join(runs[:6], ", "), len(runs)-6)
}
