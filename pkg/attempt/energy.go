package attempt

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/attempt/ownprocs"
	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
)

// hostRecord is written before the run and again after its measured
// interval: the GPUs (UUIDs, clocks, temperature, power and its limit, MIG
// mode, memory, processes) and the host (load average, other users'
// processes).
type hostRecord struct {
	At   time.Time     `json:"at"`
	GPUs []gpu.Reading `json:"gpus"`
	Host any           `json:"host"`
	Err  string        `json:"error,omitempty"`
}

// recordPreflight reads the GPUs before the run and returns the readings;
// the rest of the preflight record (the host's load and other users'
// processes, and the file) is taken beside what follows, joinHostRecords
// waits for it.
func (a *Attempt) recordPreflight() []gpu.Reading {
	at := a.env.Now()
	readings, err := a.env.GPUs.Info(a.gpuIDs)
	a.beside(func() map[string]float64 { return a.writeHost("preflight", at, readings, err) })
	return readings
}

// readHost takes a hostRecord named name, writes it to name.json in the
// attempt directory and returns the GPU readings and the record's figures,
// without touching the attempt's: safe to run beside the attempt's own
// goroutine.
func (a *Attempt) readHost(name string) ([]gpu.Reading, map[string]float64) {
	at := a.env.Now()
	readings, err := a.env.GPUs.Info(a.gpuIDs)
	return readings, a.writeHost(name, at, readings, err)
}

// writeHost completes a hostRecord taken at at with the GPUs' readings (or
// the error reading them), writes it and returns its figures. readings is
// only read.
func (a *Attempt) writeHost(name string, at time.Time, readings []gpu.Reading, rerr error) map[string]float64 {
	rec := hostRecord{At: at, GPUs: readings}
	if rerr != nil {
		rec.Err = rerr.Error()
	}
	figs := map[string]float64{}
	if h, err := gates.ReadHostRecord(a.env.UID); err == nil {
		rec.Host = h
		figs[name+"_load1"] = h.LoadAvg1
		figs[name+"_other_users_procs"] = float64(h.OtherUsersCount)
	}
	if err := atomicfile.WriteJSON(filepath.Join(a.dir, name+".json"), rec, 0o644, atomicfile.Beneath(a.env.Dir)); err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("write " + name)
	}
	return figs
}

// recordPostMeasure takes the record after the measured interval beside
// the server's shutdown.
func (a *Attempt) recordPostMeasure() {
	a.beside(func() map[string]float64 {
		_, figs := a.readHost("postmeasure")
		return figs
	})
}

// beside runs take on a goroutine of its own; joinHostRecords waits for
// it and notes the figures it returns.
func (a *Attempt) beside(take func() map[string]float64) {
	ch := make(chan map[string]float64, 1)
	a.hostRecs = append(a.hostRecs, ch)
	go func() { ch <- take() }()
}

// joinHostRecords waits for every host record taken beside the attempt
// (beside) and notes their figures. Every way out of Execute passes here
// before its last transition, so no record is written after the attempt
// ended and every figure goes with a transition.
func (a *Attempt) joinHostRecords() {
	for _, ch := range a.hostRecs {
		for k, v := range <-ch {
			a.rec.SetFigure(k, v)
		}
	}
	a.hostRecs = nil
}

// checkCPULocal judges whether the slot's CPUs are local to its GPUs.
func (a *Attempt) checkCPULocal(readings []gpu.Reading) gates.Verdict {
	aff := map[int][]int{}
	for _, r := range readings {
		aff[r.Index] = r.CPUAffinity
	}
	return gates.CPULocal(a.cpus, aff, a.env.Now())
}

// startSampler samples the GPUs into gpu-samples.jsonl while the server
// runs, and reads the energy counters at the start.
func (a *Attempt) startSampler(idle []gpu.Reading) {
	settle := sample.Settle{Reader: a.env.GPUs, GPUs: a.gpuIDs, For: seconds(a.plan.IdleSettleS)}
	for g, w := range sample.IdlePower(a.ctx, settle, idle) { // before the server loads, after a settle
		a.rec.SetFigure("idle_power_w_gpu"+strconv.Itoa(g), w)
	}
	if a.plan.SampleS <= 0 {
		return
	}
	every := time.Duration(a.plan.SampleS * float64(time.Second))
	own := ownprocs.New(a.marker())
	s, err := sample.New(sample.Config{Reader: a.env.GPUs, GPUs: a.gpuIDs, Interval: every, Path: dirlayout.GPUSamples(a.dir),
		Watch: own.Watch(a.env.UID)})
	if err == nil {
		err = s.Start(context.Background())
	}
	if err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("GPU sampler")
		// nothing watches the GPUs' processes mid-run: the check cannot tell
		v := gates.Verdict{Gate: "gpu-processes", Verdict: gates.Error, At: a.env.Now(), Detail: "the GPU sampler did not start: " + err.Error()}
		a.foreign = &v
		a.rec.Gate(v)
		return
	}
	a.sampler, a.own = s, own
}

// stopSampler ends the sampler and records its figures: energy per GPU
// from the counters and from the samples, the sampler's own cost, and the
// dynamic energy per successful request over the clean interval.
func (a *Attempt) stopSampler() { a.endSampler(false) }

// stopSamplerForSeal is stopSampler when Seal follows: the samples file is
// made durable there, with the other evidence, not once more here.
func (a *Attempt) stopSamplerForSeal() { a.endSampler(true) }

func (a *Attempt) endSampler(sealed bool) {
	if a.sampler == nil {
		return
	}
	stop := a.sampler.Stop
	if sealed {
		stop = a.sampler.StopUnsynced
	}
	sum, err := stop()
	a.sampler = nil
	if err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("GPU sampler")
	}
	a.gpuProcsGate(sum)
	a.rec.SetFigure("samples", float64(sum.Samples))
	a.rec.SetFigure("samples_missed", float64(sum.Missed))
	a.rec.SetFigure("sampler_read_mean_ms", float64(sum.MeanReadTime.Microseconds())/1000)
	a.rec.SetFigure("sampler_read_max_ms", float64(sum.MaxReadTime.Microseconds())/1000)
	for _, g := range sum.GPUs {
		i := strconv.Itoa(g.Index)
		a.rec.SetFigure("energy_sampled_j_gpu"+i, g.EnergyJ)
		a.rec.SetFigure("mean_power_w_gpu"+i, g.MeanPowerW)
		if g.CounterEnergyJ != nil {
			a.rec.SetFigure("energy_j_gpu"+i, *g.CounterEnergyJ)
		}
	}
	e, err := a.energyPerRequest()
	if err == nil && !math.IsNaN(e) {
		a.rec.SetFigure("energy_per_request_j", e)
	} else if err != nil {
		a.env.Log.Info().Str("run", a.run.ID).Str("why", err.Error()).Msg("no energy per request")
	}
	if werr := sample.WriteEnergy(filepath.Join(a.dir, "energy.json"), e, err, atomicfile.Beneath(a.env.Dir)); werr != nil {
		a.env.Log.Warn().Err(werr).Str("run", a.run.ID).Msg("write energy.json")
	}
}

// energyPerRequest is the methodology's dynamic energy per successful
// request: the integral of (power - idle power) over the clean interval,
// summed over the run's GPUs, divided by the successes the client
// reported with its "done" phase.
func (a *Attempt) energyPerRequest() (float64, error) {
	if a.phases == nil {
		return 0, fmt.Errorf("the client reported no successes")
	}
	successes, ok := a.phases.Successes()
	if !ok {
		return 0, fmt.Errorf("the client reported no successes")
	}
	// the clean interval: from the first clean line to the first profile
	// line (profile and recovery are not clean), or to drain without one
	t0, t1 := a.phases.At("clean"), a.phases.At("profile")
	if t1.IsZero() {
		t1 = a.phases.At("drain")
	}
	if t0.IsZero() || t1.IsZero() {
		return 0, fmt.Errorf("the client reported no clean interval")
	}
	recs, err := sample.ReadFile(dirlayout.GPUSamples(a.dir))
	if err != nil || len(recs) == 0 {
		return 0, fmt.Errorf("no GPU samples: %v", err)
	}
	// wall time to CLOCK_MONOTONIC, by the first sample's pair
	off := recs[0].MonoNS - recs[0].Time.UnixNano()
	idle := map[int]float64{}
	for _, g := range a.gpuIDs {
		idle[g] = a.rec.Figure("idle_power_w_gpu" + strconv.Itoa(g))
	}
	return sample.EnergyPerRequest(recs, idle, t0.UnixNano()+off, t1.UnixNano()+off, successes)
}
