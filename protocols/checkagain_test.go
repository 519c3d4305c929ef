package protocols

import (
	"bytes"
	"os"
	"testing"
)

// testdata/opprof-phase3-check-again.yaml is the seed's protocol with the
// co-location check run again instead of taken from E-a's verdict (its
// prior: line left out): what the tests of the co-location phase plan.
// WARDEN_WRITE_TESTDATA=1 writes it; this test checks it is the shipped
// protocol so changed.
func TestCheckAgainTestdata(t *testing.T) {
	b, err := os.ReadFile("opprof-phase3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	line := []byte("    prior: {verdict: phase3/E-a/colocation-verdict.json}\n")
	if bytes.Count(b, line) != 1 {
		t.Fatalf("opprof-phase3.yaml has no line %q", line)
	}
	want := bytes.Replace(b, line, nil, 1)
	const path = "testdata/opprof-phase3-check-again.yaml"
	if os.Getenv("WARDEN_WRITE_TESTDATA") == "1" {
		os.WriteFile(path, want, 0o644)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not opprof-phase3.yaml without its prior verdict (err %v); WARDEN_WRITE_TESTDATA=1 rewrites it", path, err)
	}
}
