package amend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"warden/protocols"
)

// TestOneTokenChangedIsOneLine (issue 39, friction 3): an amendment that
// changes one argument of the server every run starts reads as that
// argument once, path: old -> new, with the runs it touches, not the
// whole server object per run; -o json carries the same changes.
func TestOneTokenChangedIsOneLine(t *testing.T) {
	b, err := os.ReadFile("../../protocols/testdata/mini.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan := func(seqs string) *protocols.Plan {
		y := strings.Replace(string(b), `command: [standin, server, --port, "${PORT}"]`, `command: [standin, server, --port, "${PORT}", --max-num-seqs, "`+seqs+`"]`, 1)
		p, err := protocols.PlanBytes("mini.yaml", []byte(y), protocols.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	d := PlanDiff(plan("8"), plan("16"))
	var buf bytes.Buffer
	Result{Amendment: "A-1", Status: "recorded", Diff: d}.WriteText(&buf)
	want := "amendment A-1: protocol " + short(d.Before) + " -> " + short(d.After) + "\n" +
		`  server.command.argv[5]: "8" -> "16" (4 runs: A.sat, A.mod, B.sat, B.mod)` + "\nrecorded\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
	js, _ := json.Marshal(d)
	var doc struct {
		Changes []Change `json:"changes"`
	}
	if err := json.Unmarshal(js, &doc); err != nil || len(doc.Changes) != 1 || doc.Changes[0].Field != "server.command.argv[5]" || len(doc.Changes[0].Runs) != 4 {
		t.Fatalf("-o json changes: %s", js)
	}
	// the record keeps each run's changed fields as before
	if len(d.Changed) != 4 || d.Changed[0].Fields[0].Field != "server" {
		t.Fatalf("runs changed %+v", d.Changed)
	}

	// twelve runs: the first six named, and how many more
	var many Diff
	for i := range 12 {
		many.Changed = append(many.Changed, RunChange{Run: fmt.Sprintf("r%d", i), Fields: []FieldDiff{{Field: "watchdog_s", Old: json.RawMessage("20"), New: json.RawMessage("30")}}})
	}
	buf.Reset()
	Result{Amendment: "A-2", Status: "shown", Diff: many}.WriteText(&buf)
	if !strings.Contains(buf.String(), "\n  watchdog_s: 20 -> 30 (12 runs: r0, r1, r2, r3, r4, r5 and 6 more)\n") || strings.Count(buf.String(), "watchdog_s") != 1 {
		t.Fatalf("twelve runs:\n%s", buf.String())
	}
}
