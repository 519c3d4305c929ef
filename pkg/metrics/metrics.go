// Package metrics exposes a campaign in the Prometheus exposition format,
// for orchestrators: runs by state, the GPU-hour budget, the controller's
// heartbeat, attempt durations, the last stop reason, and whether the GPUs
// are fake.
//
// The collector reads the state database at every scrape (or textfile
// write) and keeps nothing of its own, so it shows what the records say
// and never drifts from them; nothing in the campaign driver feeds it.
package metrics

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"warden/pkg/api"
	"warden/pkg/state"
)

// DurationBuckets are the attempt-duration histogram's upper bounds in
// seconds: from a stand-in's few seconds to a long benchmark's hours.
var DurationBuckets = []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400}

var (
	descInfo = prometheus.NewDesc("warden_campaign_info",
		"The campaign: 1, labelled with its id, protocol and protocol hash.", []string{"campaign", "protocol", "protocol_sha256"}, nil)
	descState = prometheus.NewDesc("warden_campaign_state",
		"1 for the campaign's state (running, stopped, complete), 0 for the others.", []string{"state"}, nil)
	descStop = prometheus.NewDesc("warden_campaign_stop_reason",
		"1 for the reason of the campaign's last stop (absent while it never stopped).", []string{"reason"}, nil)
	descRuns = prometheus.NewDesc("warden_runs",
		"Runs by state (pending, running, complete, quarantined, failed).", []string{"state"}, nil)
	descBudget = prometheus.NewDesc("warden_budget_gpu_seconds",
		"The GPU budget in GPU-seconds (GPU-hours x 3600): charged (with prior consumption), in_flight (held by live attempts' servers since they started, not yet charged), reserved, and cap.", []string{"kind"}, nil)
	descBeat = prometheus.NewDesc("warden_controller_heartbeat_timestamp_seconds",
		"Unix time of the controller's last heartbeat.", nil, nil)
	descBeatAge = prometheus.NewDesc("warden_controller_heartbeat_age_seconds",
		"Seconds since the controller's last heartbeat, at the scrape.", nil, nil)
	descBackend = prometheus.NewDesc("warden_gpu_backend",
		"The campaign's GPU backend: 1, labelled nvml, fake, or unknown (a campaign recorded before the record named it).", []string{"backend"}, nil)
	descFake = prometheus.NewDesc("warden_fake_gpus",
		"1 when the campaign runs on file-backed fake GPUs (nothing measured is a GPU's), 0 on NVML; absent when unknown.", nil, nil)
	descDur = prometheus.NewDesc("warden_attempt_duration_seconds",
		"Durations of attempts that ended, from creation to their terminal state, by that state.", []string{"outcome"}, nil)
)

var runStates = []state.RunState{state.RunPending, state.RunRunning, state.RunComplete, state.RunQuarantined, state.RunFailed}

var campaignStates = []state.CampaignState{state.CampaignRunning, state.CampaignStopped, state.CampaignComplete}

var outcomes = []state.AttemptState{state.Complete, state.Quarantined, state.Failed, state.Interrupted}

// Collector is a prometheus.Collector of one campaign's records.
type Collector struct {
	Store *state.Store
	// Now is the clock for the heartbeat's age and live attempts; nil
	// means time.Now.
	Now func() time.Time
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descState, descStop, descRuns, descBudget, descBeat, descBeatAge, descBackend, descFake, descDur} {
		ch <- d
	}
}

// Collect reads the store and sends the metrics. A read that fails is
// sent as an invalid metric, which the scrape reports as an error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	sum, err := c.Store.Summary()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descRuns, fmt.Errorf("read campaign summary: %w", err))
		return
	}
	cp := sum.Campaign
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, cp.ID, cp.ProtocolName, cp.ProtocolSHA256)
	backend, fake := api.BackendOf(cp)
	ch <- prometheus.MustNewConstMetric(descBackend, prometheus.GaugeValue, 1, backend)
	if backend != "unknown" {
		ch <- prometheus.MustNewConstMetric(descFake, prometheus.GaugeValue, b2f(fake))
	}
	for _, s := range campaignStates {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, b2f(cp.State == s), string(s))
	}
	if cp.StopReason != "" {
		ch <- prometheus.MustNewConstMetric(descStop, prometheus.GaugeValue, 1, string(cp.StopReason))
	}
	for _, s := range runStates {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(sum.RunsByState[string(s)]), string(s))
	}
	inFlight := 0.0
	for _, a := range sum.Live {
		inFlight += api.InFlightGPUSeconds(a, now)
	}
	for kind, v := range map[string]float64{
		"charged": cp.ConsumedGPUSeconds, "in_flight": inFlight,
		"reserved": cp.ReservedGPUSeconds, "cap": cp.BudgetCapGPUHours * 3600,
	} {
		ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, v, kind)
	}
	if !cp.Heartbeat.IsZero() {
		ch <- prometheus.MustNewConstMetric(descBeat, prometheus.GaugeValue, float64(cp.Heartbeat.UnixNano())/1e9)
		ch <- prometheus.MustNewConstMetric(descBeatAge, prometheus.GaugeValue, now.Sub(cp.Heartbeat).Seconds())
	}
	if err := c.durations(ch); err != nil {
		ch <- prometheus.NewInvalidMetric(descDur, err)
	}
}

// durations sends one histogram per outcome of the attempts that ended.
func (c *Collector) durations(ch chan<- prometheus.Metric) error {
	runs, err := c.Store.Runs()
	if err != nil {
		return fmt.Errorf("read runs: %w", err)
	}
	type hist struct {
		n       uint64
		sum     float64
		buckets map[float64]uint64
	}
	hs := map[state.AttemptState]*hist{}
	for _, o := range outcomes {
		hs[o] = &hist{buckets: map[float64]uint64{}}
	}
	for _, r := range runs {
		if r.Attempts == 0 {
			continue
		}
		atts, err := c.Store.Attempts(r.ID)
		if err != nil {
			return fmt.Errorf("read attempts of %s: %w", r.ID, err)
		}
		for _, a := range atts {
			h, ok := hs[a.State]
			if !ok {
				continue
			}
			d := a.UpdatedAt.Sub(a.CreatedAt).Seconds()
			h.n++
			h.sum += d
			for _, b := range DurationBuckets {
				if d <= b {
					h.buckets[b]++
				}
			}
		}
	}
	for _, o := range outcomes {
		h := hs[o]
		ch <- prometheus.MustNewConstHistogram(descDur, h.n, h.sum, h.buckets, string(o))
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns a registry holding the campaign's collector only.
func Registry(s *state.Store, now func() time.Time) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&Collector{Store: s, Now: now})
	return reg
}

// Handler serves the registry's metrics at any path.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// WriteTextfile writes the metrics to path for node_exporter's textfile
// collector, atomically (a temporary file renamed over it).
func WriteTextfile(path string, reg *prometheus.Registry) error {
	return prometheus.WriteToTextfile(path, reg)
}

// CheckLoopback refuses a listen address that is not on a loopback
// interface: the metrics name the campaign and are served without
// authentication.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w (want 127.0.0.1:PORT)", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("metrics address %q is not a loopback address (want 127.0.0.1:PORT or [::1]:PORT)", addr)
	}
	return nil
}
