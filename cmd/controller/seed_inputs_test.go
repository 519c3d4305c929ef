package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// manifestProtocol is the test protocol with one recorded manifest, named
// by the saturation load, and a client that runs the stand-in client and
// then reports the manifest's hash as `report` computes it (a shell
// expression) in client/manifest.json, its result file; after may change
// the manifest once the report is written. One run at a time.
func manifestProtocol(t *testing.T, report, after string) (proto, manifest, sum string) {
	t.Helper()
	manifest = filepath.Join(t.TempDir(), "P01.jsonl")
	body := []byte(`{"id":"r0","input_tokens":4,"output_tokens":4}` + "\n")
	if err := os.WriteFile(manifest, body, 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(body)
	client := `{shell: '"${STANDIN}" client --warmup-s 0.2 --measure-s 0.3 --drain-s 2 --concurrency 1 --result-dir "${ATTEMPT_DIR}/client" && printf ''{"manifest":{"sha256":"%s"}}'' "` + report + `" > "${ATTEMPT_DIR}/client/manifest.json"` + after + `'}`
	proto = writeProtocol(t, scenario{patterns: 2, client: client})
	proto = testcampaign.Edit(t, proto, "concurrency: 2", "concurrency: 1",
		"slots:\n", "provenance:\n  - {path: "+manifest+", role: manifest}\nslots:\n",
		"    expected_s: 10\n    client: {shell:", "    expected_s: 10\n    manifest: "+manifest+"\n    result_file: client/manifest.json\n    client: {shell:")
	return proto, manifest, hex.EncodeToString(h[:])
}

// A client whose result reports another manifest hash than the one
// recorded at start fails its run (input-changed) and stops the campaign.
func TestClientManifestHashMismatchStops(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	bogus := strings.Repeat("0", 64)
	proto, manifest, sum := manifestProtocol(t, bogus, "")
	c.runForeground(proto)
	s := c.store()
	c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonInputChanged)
	cp, _ := s.Campaign()
	want := "manifest " + manifest + ": recorded sha256 " + sum + ", the client read " + bogus
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonInputChanged) || !strings.Contains(cp.StopDetail, want) {
		t.Fatalf("campaign %s %s: %s (want %q)", cp.State, cp.StopReason, cp.StopDetail, want)
	}
}

// A result that reports no manifest hash cannot be checked: the run fails
// (fail closed).
func TestClientManifestHashMissingFails(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto, _, _ := manifestProtocol(t, "", "")
	proto = testcampaign.Edit(t, proto, "result_file: client/manifest.json", "result_file: client/result.json")
	c.runForeground(proto)
	s := c.store()
	c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonInputChanged)
	cp, _ := s.Campaign()
	if !strings.Contains(cp.StopDetail, "reports no manifest.sha256") {
		t.Fatalf("stop detail %q", cp.StopDetail)
	}
}
