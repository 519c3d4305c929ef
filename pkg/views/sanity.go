package views

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"warden/pkg/api"
	"warden/pkg/contract"
	"warden/pkg/dirlayout"
)

// The data sanity block an attempt's sanity validator wrote
// (ATTEMPT_DIR/sanity.json, schema warden.sanity/1; docs/validators.md) is
// contract.SanityBlock. ctlq reads it from the attempt directory, on this
// host.

// RunWithSanity is `ctlq show -o json`: the run and, by attempt number,
// the sanity blocks found.
type RunWithSanity struct {
	api.RunDetail
	Sanity map[string]json.RawMessage `json:"sanity,omitempty"`
	// StderrTails are the ends of the failed processes' stderr.
	StderrTails []StderrTail `json:"stderr_tails,omitempty"`
	// Serving is the serving summary of the attempt that counts, once it
	// has ended (ServingOf).
	Serving *Serving `json:"serving,omitempty"`
}

// MarshalJSON writes the run's document (api.RunDetail's, whose
// MarshalJSON the embedding would otherwise make the whole of it) with
// this type's own fields after its keys, as their json tags say.
func (r RunWithSanity) MarshalJSON() ([]byte, error) {
	b, err := r.RunDetail.MarshalJSON()
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(r)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Anonymous || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if fv := v.Field(i); opts == "omitempty" && emptyJSON(fv) {
			continue
		}
		k, _ := json.Marshal(name)
		val, err := json.Marshal(v.Field(i).Interface())
		if err != nil {
			return nil, err
		}
		b = append(append(append(append(b[:len(b)-1], ','), k...), ':'), val...)
		b = append(b, '}')
	}
	return b, nil
}

// emptyJSON says whether v is what encoding/json's omitempty leaves out.
func emptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// SanityBlocks reads the sanity.json of every attempt that has one.
func SanityBlocks(d api.RunDetail) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, a := range d.Attempts {
		b, err := os.ReadFile(dirlayout.Sanity(a.Dir))
		if err != nil || !json.Valid(b) {
			continue
		}
		out[strconv.Itoa(a.N)] = b
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// printSanity renders one attempt's block: verdict, red flags, then one
// line per family.
func printSanity(w io.Writer, raw json.RawMessage) {
	var blk contract.SanityBlock
	if err := json.Unmarshal(raw, &blk); err != nil {
		fmt.Fprintf(w, "  sanity block unreadable: %s\n", Esc(err.Error()))
		return
	}
	blk = Escaped(blk)
	fmt.Fprintf(w, "  sanity block (%s): %s, %d families, %d red flags, %d undeclared constants\n",
		blk.Schema, blk.Verdict, len(blk.Families), len(blk.RedFlags), len(blk.UndeclaredConstants))
	for _, f := range blk.RedFlags {
		fmt.Fprintf(w, "    RED FLAG %s\n", f)
	}
	fmt.Fprintf(w, "    %-60s %-8s %7s %7s %7s %12s %12s %8s\n", "family", "kind", "n", "finite", "missing", "min", "max", "distinct")
	for _, f := range blk.Families {
		exp := ""
		if f.Expected != nil {
			exp = " expected " + strconv.FormatFloat(*f.Expected, 'g', -1, 64)
		}
		fmt.Fprintf(w, "    %-60s %-8s %7d %7d %7d %12s %12s %8d%s\n", f.Name, f.Kind, f.N, f.Finite, f.Missing, num(f.Min), num(f.Max), f.Distinct, exp)
	}
}

func num(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'g', 6, 64)
}
