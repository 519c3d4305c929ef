package main

// The quality pass end to end: bin/loadgen against the stand-in's Omni
// kinds sends the manifest's first rows again after the drain, streamed and
// not, keeps both outputs in a private directory and compares their audio.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/contract"
	"warden/pkg/gates"
	"warden/pkg/loadgen"
	"warden/protocols"
)

// qualityRun runs bin/loadgen with a quality pass of two rows against a
// stand-in of kind with the extra stand-in flags; it returns the result,
// the private directory and the result directory.
func qualityRun(t *testing.T, kind string, standin ...string) (loadgen.Result, string, string) {
	t.Helper()
	url := startStandin(t, "1", append([]string{"--server-kind", kind, "--audio-chunks", "3"}, standin...)...)
	dir := t.TempDir()
	priv := filepath.Join(t.TempDir(), "outputs")
	resDir := filepath.Join(dir, "client")
	args := append([]string{"run", "--base-url", url, "--model", "m", "--load-point", "closed", "--request-rate", "inf",
		"--max-concurrency", "2", "--ignore-eos", "--endpoint", "chat", "--modalities", "text,audio", "--server-kind", kind,
		"--manifest", textManifest(t, dir, 400), "--seed-records", "off", "--result-dir", resDir,
		"--quality-rows", "2", "--quality-dir", priv}, shortTimeline("10")...)
	if code, out := loadgenRun(t, nil, args...); code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	return readResult(t, resDir), priv, resDir
}

// TestQualityPassKeepsOutputsPrivately: both rows are sent streamed and
// not, their text and audio kept in the private directory (0700, files
// 0600), the result holding only sample figures and the files' hashes; the
// stand-in's complete output is the stream's waveform, so both compare
// equal and the waveform validator passes stream_matches_full.
func TestQualityPassKeepsOutputsPrivately(t *testing.T) {
	for _, kind := range []string{"vllm-omni", "sglang-omni"} {
		t.Run(kind, func(t *testing.T) {
			res, priv, resDir := qualityRun(t, kind)
			q := res.Quality
			if q == nil || q.Rows != 2 || q.Kept != 2 || q.Compared != 2 || q.Mismatched != 0 {
				t.Fatalf("quality %+v", q)
			}
			for _, r := range q.Requests {
				if !r.Match || r.StreamSamples != 3*2400 || r.FullSamples != 3*2400 || *r.RelRMS != 0 || len(r.Files) != 3 {
					t.Fatalf("row %+v", r)
				}
			}
			if fi, err := os.Stat(priv); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("private directory %v %v", fi, err)
			}
			b, err := os.ReadFile(filepath.Join(priv, "000000.json"))
			if err != nil || !bytes.Contains(b, []byte(`"stream_text":"`)) || !bytes.Contains(b, []byte(`"id":"T-0000"`)) {
				t.Fatalf("kept text %s %v", b, err)
			}
			for _, name := range []string{"000000.json", "000000.stream.wav", "000001.full.wav"} {
				if fi, err := os.Stat(filepath.Join(priv, name)); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %v %v", name, fi, err)
				}
			}
			raw, _ := os.ReadFile(filepath.Join(resDir, "result.json"))
			if bytes.Contains(raw, []byte(priv)) || bytes.Contains(raw, []byte("stream_text")) {
				t.Fatal("result.json names the private directory or holds the kept text")
			}
			if v := contract.WaveformDir(resDir); v.Verdict != "pass" || v.Figures["compared_requests"] != 2 {
				t.Fatalf("waveform %s %q %v", v.Verdict, v.Detail, v.Figures)
			}
			// the attempt's privacy scan under omni-ab's forbidden fields
			// finds nothing in the client's files
			p, err := protocols.PlanFile("../../protocols/omni-ab.yaml", protocols.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if v := gates.PrivacyScan(resDir, p.Privacy, nil, nil, 64<<20, time.Now()); v.Verdict != "pass" {
				t.Fatalf("privacy scan under %v: %s %s", p.Privacy, v.Verdict, v.Detail)
			}
		})
	}
}

// TestQualityPassSeesABoundaryDrop: five samples dropped at a chunk
// boundary under consistent headers and without offsets pass every stream
// rule, and the comparison with the complete output finds them; a
// complete output that differs in its samples is found too.
func TestQualityPassSeesABoundaryDrop(t *testing.T) {
	res, _, resDir := qualityRun(t, "vllm-omni", "--audio-drop-samples", "5")
	if q := res.Quality; q == nil || q.Compared != 2 || q.Mismatched != 2 || q.Requests[0].LengthDiffSamples != 0 || *q.Requests[0].RelRMS < 0.1 {
		t.Fatalf("quality %+v", res.Quality)
	}
	v := contract.WaveformDir(resDir)
	if v.Verdict != "fail" || !strings.Contains(v.Detail, "stream_matches_full: row 0") || strings.Contains(v.Detail, "header_length") {
		t.Fatalf("waveform %s %q", v.Verdict, v.Detail)
	}
	res, _, _ = qualityRun(t, "sglang-omni", "--audio-full-differ-samples", "100")
	if q := res.Quality; q == nil || q.Mismatched != 2 || q.Requests[1].LengthDiffSamples != 0 {
		t.Fatalf("quality %+v", res.Quality)
	}
}

// TestQualityDirRefusedInsideTheCampaign: a private directory inside the
// campaign directory would put generated text and audio among its public
// files: refused before the run (exit 2).
func TestQualityDirRefusedInsideTheCampaign(t *testing.T) {
	camp := t.TempDir()
	code, out := loadgenRun(t, []string{"WARDEN_CAMPAIGN_DIR=" + camp}, "run", "--base-url", "http://127.0.0.1:1", "--model", "m",
		"--manifest", textManifest(t, t.TempDir(), 4), "--request-rate", "inf", "--load-point", "closed", "--result-dir", filepath.Join(t.TempDir(), "c"),
		"--quality-rows", "1", "--quality-dir", filepath.Join(camp, "runs", "x", "outputs"))
	if code != 2 || !strings.Contains(out, "is inside the campaign directory") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}
