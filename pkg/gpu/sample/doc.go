// Package sample samples GPUs periodically into a file of JSON lines and
// integrates the power it saw into energy.
//
// A Sampler reads the fast fields and the processes of its GPUs
// (gpu.Sampled, through a Reader: nvmlgpu.Backend or fakegpu.Backend) once
// at Start, then once per interval, and once more at Stop. Each read
// becomes one line (a Record) appended to the output file, every GPU with
// the processes on it (pid, uid, used MiB), and is passed to Config.Watch
// when set:
//
//	{"time":"…","mono_ns":…,"took_ns":…,"gpus":[{"index":0,"uuid":"GPU-…","power_w":312.5,…}]}
//
// When the Reader can also read energy counters (EnergyReader), the
// sampler reads them before its first sample and after its last, as
// records of kind "energy", and the Summary compares them with the
// integrated power.
//
// Invariants:
//
//   - The sampling goroutine starts in Start and has ended when Stop
//     returns; Stop flushes, fsyncs and closes the file.
//   - Every line is complete and flushed when the sample's read returns: a
//     reader of the file sees whole lines, except perhaps a last one cut by a
//     crash, which ReadRecords skips.
//   - mono_ns is CLOCK_MONOTONIC of this host in nanoseconds (what Python's
//     time.monotonic_ns() and Go's monotonic readings count), so samples can
//     be placed on the timeline of other processes' records.
//   - A read that fails is written with its error and counted, and is not a
//     power point: integration runs straight from the point before it to
//     the point after it.
//   - The sampler reads its clock twice per sample, before and after the
//     read, and once per energy read.
//
// Caveats:
//
//   - The sampler is its own goroutine, not its own process: a read that
//     takes longer than the interval delays the next one (a Summary counts
//     such samples as missed) and the ticker drops the ticks in between.
//   - The file is a log, appended to; it is not written through a temporary
//     file and a rename. Two samplers must not share one path.
//   - Power integrated from samples misses what happens between them; the
//     energy counters (NVML's total energy) do not. Sample at least ten
//     times faster than the shortest interval to be measured.
//   - The power NVML reports may be smoothed by the driver, so that it lags
//     changes: on an H200 settling from 138 W to 85 W, two seconds of 10 ms
//     samples integrated to 199 J where the counter said 171 J; at steady
//     power the two agreed within 0.2%. Take energy from the counters at
//     the boundaries, and the samples for its shape.
package sample
