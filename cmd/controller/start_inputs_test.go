package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A missing provenance file, relative to the workdir as the docs say:
// plan exits 2 naming file, line and field, and so does start, with no
// raw Go error and nothing left behind; put in place, the same relative
// path is found.
func TestMissingProvenanceRefusedAtPlanAndStart(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{})
	withProvenance(t, proto, "inputs/helper.py")
	want := regexp.MustCompile(`e2e\.yaml:\d+:\d+: provenance\[0\]\.path: inputs/helper\.py \(relative to the workdir, [^)]+\) does not exist`)
	out, code := c.controller("plan", "-f", proto)
	if code != exitInvalid || !want.MatchString(out) {
		t.Fatalf("plan: exit %d, want %d and %s:\n%s", code, exitInvalid, want, out)
	}
	out, code = c.startBounded(proto)
	if code != exitInvalid || !want.MatchString(out) || strings.Contains(out, "lstat") || strings.Contains(out, "open ") {
		t.Fatalf("start: exit %d, want %d and %s:\n%s", code, exitInvalid, want, out)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Fatalf("a refused start left %s (%v)", c.dir, err)
	}
	out, code = c.controller("plan", "-f", proto, "-o", "json", "--check-inputs=false")
	if code != 0 {
		t.Fatalf("plan --check-inputs=false: exit %d:\n%s", code, out)
	}
	m := regexp.MustCompile(`"workdir": "([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no workdir in the plan:\n%s", out)
	}
	workdir := m[1]
	if !filepath.IsAbs(workdir) {
		workdir = filepath.Join(filepath.Dir(proto), workdir)
	}
	if err := os.MkdirAll(filepath.Join(workdir, "inputs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(workdir, "inputs", "helper.py"), []byte("print('ok')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("plan", "-f", proto); code != 0 {
		t.Fatalf("plan with the file in place: exit %d:\n%s", code, out)
	}
}
