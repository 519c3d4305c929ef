package views

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/state"
)

func TestShowSanityBlock(t *testing.T) {
	dir := t.TempDir()
	blk := `{"schema":"warden.sanity/1","inputs":["client/result.json"],"families":[
 {"name":"client/result.json:clean.input_tokens","kind":"counter","n":1,"finite":1,"missing":0,"min":-1,"max":-1,"distinct":1,"constant":false,"red_flags":["negative counter: min -1"]},
 {"name":"client/result.json:timeline.num_clean_segments","kind":"counter","n":1,"finite":1,"missing":0,"min":3,"max":3,"distinct":1,"expected":3,"constant":false}],
 "red_flags":["client/result.json:clean.input_tokens: negative counter: min -1"],"undeclared_constants":[],"verdict":"fail"}`
	if err := os.WriteFile(filepath.Join(dir, "sanity.json"), []byte(blk), 0o644); err != nil {
		t.Fatal(err)
	}
	d := api.RunDetail{Attempts: []state.Attempt{{N: 1, Dir: dir}, {N: 2, Dir: t.TempDir()}}}
	var w bytes.Buffer
	PrintRun(&w, d)
	out := w.String()
	for _, want := range []string{"attempt 1 data sanity", "fail, 2 families, 1 red flags", "RED FLAG client/result.json:clean.input_tokens: negative counter",
		"timeline.num_clean_segments", "expected 3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "attempt 2 data sanity") {
		t.Fatalf("an attempt without sanity.json shows a block:\n%s", out)
	}
	var js bytes.Buffer
	if err := json.NewEncoder(&js).Encode(RunWithSanity{RunDetail: d, Sanity: SanityBlocks(d)}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Sanity map[string]struct {
			Verdict string `json:"verdict"`
		} `json:"sanity"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || len(got.Sanity) != 1 || got.Sanity["1"].Verdict != "fail" {
		t.Fatalf("json %v: %s", err, js.String())
	}
}
