package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"warden/pkg/metrics"
	"warden/pkg/state"
)

// campaign makes a stopped campaign: one run complete after 40 s, one
// failed after 10 s, one live for 30 s at scrape time, one pending.
func campaign(t *testing.T) (*state.Store, time.Time) {
	t.Helper()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := t0
	s, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{Strict: true, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	runs := []state.Run{{ID: "a", ExpectedS: 10}, {ID: "b", Order: 1, ExpectedS: 10}, {ID: "c", Order: 2, ExpectedS: 10}, {ID: "d", Order: 3, ExpectedS: 10}}
	if err := s.CreateCampaign(state.Campaign{ID: "m-1", ProtocolName: "p", ProtocolSHA256: "ab", State: state.CampaignRunning,
		BudgetCapGPUHours: 2, PriorGPUHours: 0.5}, runs); err != nil {
		t.Fatal(err)
	}
	walk := func(run string, d time.Duration, to ...state.AttemptState) {
		at := clock
		if _, err := s.NewAttempt(run, "", func(a *state.Attempt) {
			a.GPUIDs = []int{0, 1}
			a.Procs = []state.Proc{{Role: "server", PID: 1, StartedAt: at}}
		}); err != nil {
			t.Fatal(err)
		}
		for i, st := range to {
			if i == len(to)-1 {
				clock = clock.Add(d)
			}
			var reason state.Reason
			if st == state.Failed {
				reason = state.ReasonGPUNotIdle
			}
			if _, err := s.Transition(run, 1, st, reason, "", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	walk("a", 40*time.Second, state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete)
	walk("b", 10*time.Second, state.Reserved, state.Preflight, state.Failed)
	liveFrom := clock
	walk("c", 0, state.Reserved, state.Preflight, state.Starting)
	if err := s.UpdateCampaign(func(c *state.Campaign) error { c.Heartbeat = liveFrom.Add(25 * time.Second); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCampaignState(state.CampaignStopped, string(state.StopOperator), "stopped", nil); err != nil {
		t.Fatal(err)
	}
	return s, liveFrom.Add(30 * time.Second)
}

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: HTTP %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		for _, lp := range m.Label {
			if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with %v", name, labels)
	return nil
}

// TestScrape scrapes the metrics over HTTP and parses the exposition.
func TestScrape(t *testing.T) {
	s, now := campaign(t)
	fams := scrape(t, metrics.Handler(metrics.Registry(s, func() time.Time { return now })))
	gauge := func(name string, labels map[string]string) float64 {
		return value(t, fams, name, labels).GetGauge().GetValue()
	}
	for st, want := range map[string]float64{"complete": 1, "failed": 1, "running": 1, "pending": 1, "quarantined": 0} {
		if got := gauge("warden_runs", map[string]string{"state": st}); got != want {
			t.Errorf("runs %s = %g, want %g", st, got, want)
		}
	}
	if got := gauge("warden_budget_gpu_seconds", map[string]string{"kind": "cap"}); got != 2*3600 {
		t.Errorf("cap %g", got)
	}
	if got := gauge("warden_budget_gpu_seconds", map[string]string{"kind": "in_flight"}); got != 30*2.0 {
		t.Errorf("in flight %g, want 30 s on 2 GPUs", got)
	}
	if got := gauge("warden_budget_gpu_seconds", map[string]string{"kind": "charged"}); got < 0.5*3600 {
		t.Errorf("charged %g does not include the prior 0.5", got)
	}
	if got := gauge("warden_controller_heartbeat_age_seconds", nil); got != 5 {
		t.Errorf("heartbeat age %g, want 5", got)
	}
	if got := gauge("warden_campaign_stop_reason", map[string]string{"reason": "operator-stop"}); got != 1 {
		t.Errorf("stop reason %g", got)
	}
	if got := gauge("warden_campaign_state", map[string]string{"state": "stopped"}); got != 1 {
		t.Errorf("state stopped %g", got)
	}
	h := value(t, fams, "warden_attempt_duration_seconds", map[string]string{"outcome": "complete"}).GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() < 40 {
		t.Errorf("complete durations: count %d sum %g", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestTextfile writes the node_exporter textfile and parses it back.
func TestTextfile(t *testing.T) {
	s, now := campaign(t)
	path := filepath.Join(t.TempDir(), "warden.prom")
	if err := metrics.WriteTextfile(path, metrics.Registry(s, func() time.Time { return now })); err != nil {
		t.Fatal(err)
	}
	if value(t, readTextfile(t, path), "warden_campaign_info", map[string]string{"campaign": "m-1"}).GetGauge().GetValue() != 1 {
		t.Fatal("no campaign info")
	}
}

// readTextfile parses a node_exporter textfile.
func readTextfile(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(f)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:9100": true, "[::1]:9100": true, "localhost:9100": true,
		"0.0.0.0:9100": false, ":9100": false, "10.0.0.1:9100": false, "9100": false} {
		if err := metrics.CheckLoopback(addr); (err == nil) != ok {
			t.Errorf("%s: %v", addr, err)
		} else if err != nil && !strings.Contains(err.Error(), "127.0.0.1:PORT") {
			t.Errorf("%s: error does not say what to give: %v", addr, err)
		}
	}
}

// TestFakeGPUsMetric: a fake campaign says so (warden_fake_gpus 1 and
// the backend label), an NVML one says 0, and one whose backend is not
// recorded says unknown and has no warden_fake_gpus.
func TestFakeGPUsMetric(t *testing.T) {
	for _, c := range []struct {
		backend, label string
		fake           float64 // -1: absent
	}{{"fake", "fake", 1}, {"nvml", "nvml", 0}, {"", "unknown", -1}} {
		s, now := campaign(t)
		if err := s.UpdateCampaign(func(cp *state.Campaign) error { cp.GPUBackend = c.backend; return nil }); err != nil {
			t.Fatal(err)
		}
		fams := scrape(t, metrics.Handler(metrics.Registry(s, func() time.Time { return now })))
		if got := value(t, fams, "warden_gpu_backend", map[string]string{"backend": c.label}).GetGauge().GetValue(); got != 1 {
			t.Errorf("%q: warden_gpu_backend{backend=%q} = %g", c.backend, c.label, got)
		}
		f, ok := fams["warden_fake_gpus"]
		switch {
		case c.fake < 0 && ok:
			t.Errorf("%q: warden_fake_gpus present: %v", c.backend, f)
		case c.fake >= 0 && (!ok || f.Metric[0].GetGauge().GetValue() != c.fake):
			t.Errorf("%q: warden_fake_gpus %v, want %g", c.backend, f, c.fake)
		}
	}
}
