package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
	"warden/pkg/state"
)

// setBackend records the campaign's GPU backend, as start does.
func setBackend(t *testing.T, dir, backend string) {
	t.Helper()
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.UpdateCampaign(func(c *state.Campaign) error { c.GPUBackend = backend; return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestFakeGPUsSaid: a campaign on fake GPUs says so in status and show,
// as text and JSON, and in the HTML report; one on NVML never says FAKE;
// one recorded before the backend was says it is not recorded.
func TestFakeGPUsSaid(t *testing.T) {
	for _, c := range []struct{ backend, json, text string }{
		{"fake", "fake", "FAKE (file-backed GPUs"},
		{"nvml", "nvml", "NVML"},
		{"", "unknown", "unknown (not recorded"},
	} {
		t.Run(c.json, func(t *testing.T) {
			dir := campaignDir(t, state.CampaignComplete)
			setBackend(t, dir, c.backend)
			fake := c.backend == "fake"

			out, code := run(t, "status", "-d", dir)
			if code != 0 || !strings.Contains(out, "gpus       "+c.text) || strings.Contains(out, "FAKE") != fake {
				t.Fatalf("status exit %d:\n%s", code, out)
			}
			out, _ = run(t, "status", "-d", dir, "-o", "json")
			var st api.Status
			if err := json.Unmarshal([]byte(out), &st); err != nil || st.Campaign.GPUBackend != c.json || st.Campaign.FakeGPUs != fake {
				t.Fatalf("status JSON (%v): %s", err, out)
			}
			if !strings.Contains(out, `"fake_gpus": `) && !strings.Contains(out, `"fake_gpus":`) {
				t.Fatalf("status JSON lacks fake_gpus: %s", out)
			}

			out, code = run(t, "show", "-d", dir, "a.saturation")
			if code != 0 || !strings.Contains(out, "gpus "+c.text) {
				t.Fatalf("show exit %d:\n%s", code, out)
			}
			out, _ = run(t, "show", "-d", dir, "a.saturation", "-o", "json")
			var d api.RunDetail
			if err := json.Unmarshal([]byte(out), &d); err != nil || d.GPUBackend != c.json || d.FakeGPUs != fake {
				t.Fatalf("show JSON (%v): %s", err, out)
			}

			html := reportPage(t, dir)
			if strings.Contains(html, `id="fake-gpus"`) != fake || !strings.Contains(html, "<dt>GPU backend</dt><dd>"+c.json+"</dd>") {
				t.Fatalf("report: fake banner %v, want %v; backend row present %v", strings.Contains(html, `id="fake-gpus"`), fake,
					strings.Contains(html, "<dt>GPU backend</dt><dd>"+c.json+"</dd>"))
			}
		})
	}
}

// noPrivateInputs writes the provenance record of a campaign with no
// inputs, as start does: report reads it for the private inputs.
func noPrivateInputs(t *testing.T, dir string) {
	t.Helper()
	if err := provenance.Write(dir, nil, provenance.Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestReportRefusesPrivateText: a report whose page would hold 48 bytes
// of a private input (here from an attempt's stop detail) is not written,
// exit 6, naming the value by its hash only; a provenance record that
// cannot be read refuses too.
func TestReportRefusesPrivateText(t *testing.T) {
	prompt := privatePrompt
	dir := campaignDir(t, state.CampaignComplete)
	recordPrivateManifest(t, dir)
	page := filepath.Join(t.TempDir(), "r.html")
	if o, code := run(t, "report", "-d", dir, "-o", page); code != 0 {
		t.Fatalf("clean report: exit %d:\n%s", code, o)
	}
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateCampaign(func(c *state.Campaign) error {
		c.StopReason, c.StopDetail = state.StopOperator, "server said: "+prompt[20:70]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	leaky := filepath.Join(t.TempDir(), "r.html")
	o, code := run(t, "report", "-d", dir, "-o", leaky)
	if code != exitPrivate || !strings.Contains(o, "private value(s) sha256:") || strings.Contains(o, prompt[20:40]) {
		t.Fatalf("leaky report: exit %d:\n%s", code, o)
	}
	if _, err := os.Stat(leaky); !os.IsNotExist(err) {
		t.Fatalf("the leaky report was written (%v)", err)
	}
	if err := os.Remove(filepath.Join(dir, provenance.SubDir, provenance.SumFile)); err != nil {
		t.Fatal(err)
	}
	if o, code := run(t, "report", "-d", dir, "-o", page); code != exitPrivate || !strings.Contains(o, "provenance") {
		t.Fatalf("no provenance record: exit %d:\n%s", code, o)
	}
}
