package contract

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteVerdict: the summary sorts the figures and shows the class;
// the last line is the result as JSON, its figures never null; -o json
// writes that line alone.
func TestWriteVerdict(t *testing.T) {
	var buf bytes.Buffer
	r := Result{Verdict: "fail", Detail: "2 traces missing", Class: "profile-artifact", Figures: map[string]float64{"traces": 6, "missing": 2, "ratio": 1.0 / 3}}
	if err := WriteVerdict(&buf, "layer2", false, r); err != nil {
		t.Fatal(err)
	}
	want := "layer2: fail [profile-artifact]: 2 traces missing\n  missing=2 ratio=0.333333 traces=6\n" +
		`{"verdict":"fail","detail":"2 traces missing","figures":{"missing":2,"ratio":0.3333333333333333,"traces":6},"class":"profile-artifact"}` + "\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := WriteVerdict(&buf, "client", true, Result{Verdict: "error", Detail: "no result.json"}); err != nil {
		t.Fatal(err)
	}
	if want := `{"verdict":"error","detail":"no result.json","figures":{}}` + "\n"; buf.String() != want {
		t.Errorf("json only: got %q, want %q", buf.String(), want)
	}
}

// TestLayer1Dir: the one stream of a directory is checked; none, two, or
// a directory that is not there give no pass.
func TestLayer1Dir(t *testing.T) {
	dir := t.TempDir()
	_, stream := l1{steps: steps(0, 9), footer: true, wall: time.Now()}.write(t, dir)
	if r := Layer1Dir(dir, "", "", DefaultLayer1); r.Verdict != "pass" || r.Figures["records"] != 10 {
		t.Fatalf("one stream: %+v", r)
	}
	if r := Layer1Dir(t.TempDir(), "", "", DefaultLayer1); r.Verdict != "fail" || !strings.Contains(r.Detail, "no Layer-1 stream") {
		t.Fatalf("no stream: %+v", r)
	}
	os.WriteFile(filepath.Join(dir, "t.jsonl"), stream, 0o644)
	if r := Layer1Dir(dir, "", "", DefaultLayer1); r.Verdict != "fail" || r.Figures["streams"] != 2 || !strings.Contains(r.Detail, "exactly one") {
		t.Fatalf("two streams: %+v", r)
	}
	if r := Layer1Dir(filepath.Join(dir, "absent"), "", "", DefaultLayer1); r.Verdict != "error" || !strings.HasPrefix(r.Detail, "layer1 directory: ") {
		t.Fatalf("absent directory: %+v", r)
	}
}

// TestWriteSanity: the block goes to out; "-" writes none; a block that
// cannot be written makes the verdict an error.
func TestWriteSanity(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "result.json"), []byte(`{"completed": 3}`), 0o644)
	out := filepath.Join(t.TempDir(), "sanity.json")
	if r := WriteSanity([]string{dir}, dir, out, DefaultSanity()); r.Verdict != "pass" {
		t.Fatalf("%+v", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var blk SanityBlock
	if err := json.Unmarshal(b, &blk); err != nil || blk.Schema != SanitySchema || len(blk.Families) != 1 || blk.Families[0].Name != "result.json:completed" {
		t.Fatalf("block %s: %v", b, err)
	}
	cwd := t.TempDir()
	t.Chdir(cwd)
	if r := WriteSanity([]string{dir}, dir, "-", DefaultSanity()); r.Verdict != "pass" {
		t.Fatalf("%+v", r)
	}
	if ents, _ := os.ReadDir(cwd); len(ents) != 0 {
		t.Fatalf(`"-" wrote %v`, ents)
	}
	bad := filepath.Join(dir, "result.json", "sanity.json") // under a file
	if r := WriteSanity([]string{dir}, dir, bad, DefaultSanity()); r.Verdict != "error" || !strings.HasPrefix(r.Detail, "write "+bad+": ") {
		t.Fatalf("unwritable: %+v", r)
	}
}
