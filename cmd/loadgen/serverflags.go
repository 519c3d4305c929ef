package main

import (
	"github.com/spf13/cobra"

	"warden/pkg/loadgen"
)

// extFlags are the flags of "loadgen run" that say how the server behaves:
// where its profile windows can be seen to end, and which server kind
// streams the responses (docs/loadgen.md, docs/servers.md).
type extFlags struct {
	tracesDir, tracePattern, layer1Stream string
	ranks                                 int
	serverKind                            string
	// modalities, minAudioSamples and audioFormat: streamed audio
	// (audio.go).
	modalities      []string
	minAudioSamples int64
	audioFormat     loadgen.AudioFormat
	// checkServedModel: read /v1/models before the run (models.go).
	checkServedModel bool
}

func bindExtFlags(cmd *cobra.Command, f *extFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.tracesDir, "profile-traces-dir", "", "the server's trace directory: each profile window waits, within --profile-window-budget-seconds, for a new complete trace per rank there before /stop_profile")
	fl.IntVar(&f.ranks, "profile-ranks", 1, "trace files expected per profile window (one per TP rank)")
	fl.StringVar(&f.tracePattern, "profile-trace-pattern", loadgen.DefaultTracePattern, "glob of the trace files in --profile-traces-dir")
	fl.StringVar(&f.layer1Stream, "profile-layer1-stream", "", "the server's Layer-1 JSONL stream, or a directory holding exactly one: without --profile-traces-dir, a window waits for it to grow by warm-up + active steps; with it, the growth is recorded (and tells a late window from a truncated one)")
	fl.StringVar(&f.serverKind, "server-kind", "auto", "the server streaming the responses: vllm, sglang, vllm-omni, sglang-omni, or auto (either reasoning field)")
	fl.StringSliceVar(&f.modalities, "modalities", nil, "chat only: the output modalities asked for (such as text,audio); with audio, streamed audio chunks are recorded and summarized")
	fl.Int64Var(&f.minAudioSamples, "min-audio-samples", loadgen.DefaultMinAudioSamples, "samples per channel an audio chunk needs to be the first playable one (TTFA); header-only and empty chunks never are")
	d := loadgen.DefaultAudioFormat
	fl.IntVar(&f.audioFormat.SampleRate, "audio-sample-rate", d.SampleRate, "the sample rate the server declares for its audio (both Omni servers: 24000); an audio chunk of another is invalid-output")
	fl.IntVar(&f.audioFormat.Channels, "audio-channels", d.Channels, "the channels the server declares for its audio (both Omni servers: 1)")
	fl.IntVar(&f.audioFormat.BitsPerSample, "audio-bits-per-sample", d.BitsPerSample, "the bits per sample the server declares for its audio (both Omni servers: 16)")
	fl.BoolVar(&f.checkServedModel, "check-served-model", false, "read the server's GET /v1/models first and refuse the run (exit 2) unless --model is among the ids it lists; they are recorded in result.json")
}

// apply puts the flags into the run's configuration.
func (f extFlags) apply(cfg *loadgen.Config) error {
	if f.tracesDir != "" && f.ranks < 1 {
		return refused("--profile-ranks %d: want at least 1", f.ranks)
	}
	kind, err := loadgen.ParseServerKind(f.serverKind)
	if err != nil {
		return refused("--server-kind: %v", err)
	}
	cfg.ServerKind = kind
	if f.minAudioSamples < 1 {
		return refused("--min-audio-samples %d: want at least 1", f.minAudioSamples)
	}
	if len(f.modalities) > 0 && cfg.Endpoint != loadgen.Chat {
		return refused("--modalities: only --endpoint chat requests carry modalities")
	}
	if a := f.audioFormat; a.SampleRate < 1 || a.Channels < 1 || a.BitsPerSample < 8 || a.BitsPerSample%8 != 0 {
		return refused("--audio-sample-rate %d, --audio-channels %d, --audio-bits-per-sample %d: want positive values, bits a multiple of 8", a.SampleRate, a.Channels, a.BitsPerSample)
	}
	cfg.Modalities, cfg.MinAudioSamples, cfg.AudioFormat = f.modalities, f.minAudioSamples, f.audioFormat
	cfg.CheckServedModel = f.checkServedModel
	cfg.ProfileWait = loadgen.ProfileWait{TracesDir: f.tracesDir, Ranks: f.ranks, TracePattern: f.tracePattern, Layer1Stream: f.layer1Stream}
	return nil
}
