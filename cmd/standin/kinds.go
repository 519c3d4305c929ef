package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/pflag"
)

// Server kinds: where the real servers differ in what Warden reads
// (docs/servers.md).
//
//   - vllm (and vllm-omni): GET /server_info?config_format=json in vLLM's
//     shape; a chat delta's reasoning text is "reasoning".
//   - sglang: GET /server_info and its deprecated alias
//     GET /get_server_info in SGLang's shape: the server arguments at the
//     top level, max_running_requests null unless --max-running-requests
//     was given, the effective value at
//     internal_states[0].effective_max_running_requests_per_dp; a chat
//     delta's reasoning text is "reasoning_content".
//   - sglang-omni: a chat stream ends with a finish chunk of its own (an
//     empty delta, the finish reason and the usage) and ignores
//     stream_options; it serves neither /server_info nor /get_server_info,
//     and /metrics (sglang_omni_* families) only with --enable-metrics; a
//     request for another model is answered 404 model_not_found.
const (
	kindVLLM       = "vllm"
	kindVLLMOmni   = "vllm-omni"
	kindSGLang     = "sglang"
	kindSGLangOmni = "sglang-omni"
)

var serverKinds = []string{kindVLLM, kindVLLMOmni, kindSGLang, kindSGLangOmni}

// kindConfig is how the stand-in's API differs by server kind.
type kindConfig struct {
	kind               string
	reasoningTokens    int
	idleTimeoutS       float64
	maxRunningRequests int // SGLang's --max-running-requests; < 0: not given
	// audio is the Omni kinds' streamed audio (audio.go).
	audio audioConfig
	// servedModelCheck: a request naming another model than the served
	// one is answered 404 in the kind's shape (vLLM's _check_model,
	// SGLang-Omni's resolve_served_model since 022b6a3d); false takes any
	// name (SGLang-Omni at 2489a10e: req.model or the default).
	servedModelCheck bool
	// noUsage: streams carry no usage (an SGLang-Omni pipeline whose
	// decode result has none).
	noUsage bool
	// enableMetrics: SGLang-Omni serves /metrics (its sglang_omni_*
	// families) only when its app is created with metrics enabled.
	enableMetrics bool
	// gauge is how the running gauge lags the requests (metrics.go).
	gauge gaugeLagConfig
	// portFallback: a busy --port is replaced by a free one, unless
	// $SGLANG_OMNI_STRICT_PORT is 1 (SGLang-Omni's _find_available_port).
	portFallback bool
	// midstreamStatus, when not 0, ends every stream after its first
	// midstreamAfter tokens with an error event of that status, then
	// [DONE] (vLLM's create_streaming_error_response).
	midstreamStatus, midstreamAfter int
}

func addKindFlags(f *pflag.FlagSet, k *kindConfig) {
	f.StringVar(&k.kind, "server-kind", kindVLLM, "the real server's behaviour to follow: vllm, vllm-omni, sglang, sglang-omni (config endpoint, reasoning field, usage chunk, routes and gauges)")
	f.IntVar(&k.reasoningTokens, "reasoning-tokens", 0, "chat streams send their first N tokens as reasoning text, in the kind's field (vLLM: reasoning, SGLang: reasoning_content)")
	f.Float64Var(&k.idleTimeoutS, "idle-timeout-s", 5, "close a kept-alive connection idle this long (uvicorn's timeout_keep_alive, 5 s)")
	f.IntVar(&k.maxRunningRequests, "max-running-requests", -1, "SGLang's --max-running-requests as given (reported as max_running_requests; null when not given)")
	f.BoolVar(&k.servedModelCheck, "served-model-check", true, "answer 404 in the kind's shape to a request naming another model than --model (sglang-omni: code model_not_found); false takes any name, as SGLang-Omni before 022b6a3d")
	f.BoolVar(&k.noUsage, "no-usage", false, "streams carry no usage, as an SGLang-Omni pipeline whose decode result has none")
	f.BoolVar(&k.enableMetrics, "enable-metrics", false, "sglang-omni: serve GET /metrics with SGLang-Omni's sglang_omni_* families (without it SGLang-Omni serves no /metrics)")
	f.StringVar(&k.gauge.mode, "running-gauge-lag", gaugeLagNone, "how /metrics' running gauge lags the requests: none; step (vLLM: refreshed only when a token is generated or a request finishes, so a cancelled stream stays counted until the next step); idle-window (SGLang before #31517: once idle, the last step's value stays --running-gauge-idle-s)")
	f.Float64Var(&k.gauge.idleS, "running-gauge-idle-s", 30, "with --running-gauge-lag idle-window: seconds an idle server keeps publishing its last step's running count (SGLang's idle-log window)")
	f.BoolVar(&k.portFallback, "port-fallback", false, "a busy --port is replaced by a free one, logged, unless $SGLANG_OMNI_STRICT_PORT=1 (then the server exits with an error), as SGLang-Omni's launcher does")
	f.IntVar(&k.midstreamStatus, "midstream-error-status", 0, "misbehave: end every stream after --midstream-error-after tokens with an error event of this HTTP status ({\"error\": {..., \"code\": N}}), then [DONE] (0: never)")
	f.IntVar(&k.midstreamAfter, "midstream-error-after", 1, "tokens a stream sends before --midstream-error-status's error event")
	addAudioFlags(f, &k.audio)
}

func (k kindConfig) validate() error {
	if !slices.Contains(serverKinds, k.kind) {
		return fmt.Errorf("--server-kind %q: want one of %v", k.kind, serverKinds)
	}
	if k.reasoningTokens < 0 || k.idleTimeoutS <= 0 {
		return fmt.Errorf("--reasoning-tokens must not be negative and --idle-timeout-s must be positive")
	}
	if k.midstreamStatus != 0 && (k.midstreamStatus < 400 || k.midstreamStatus > 599) || k.midstreamAfter < 0 {
		return fmt.Errorf("--midstream-error-status %d: want an HTTP error status (400-599), --midstream-error-after not negative", k.midstreamStatus)
	}
	if k.enableMetrics && k.kind != kindSGLangOmni {
		return fmt.Errorf("--enable-metrics is SGLang-Omni's switch; the other kinds always serve /metrics")
	}
	if err := k.gauge.validate(); err != nil {
		return err
	}
	return k.audio.validate()
}

func (k kindConfig) sglang() bool { return k.kind == kindSGLang || k.kind == kindSGLangOmni }

func (k kindConfig) idleTimeout() time.Duration { return seconds(k.idleTimeoutS) }

// delta is a chat delta carrying token i's text: reasoning for the first
// reasoningTokens tokens, in the kind's field, else content.
func (k kindConfig) delta(i int) *chatDelta {
	if i >= k.reasoningTokens {
		return &chatDelta{Content: token(i)}
	}
	if k.sglang() {
		return &chatDelta{ReasoningContent: token(i)}
	}
	return &chatDelta{Reasoning: token(i)}
}

// usageOnFinish reports whether a chat stream carries its usage on the
// finish chunk, whatever stream_options says (SGLang-Omni).
func (k kindConfig) usageOnFinish() bool { return k.kind == kindSGLangOmni }

// usage is a stream's usage: the generation's, or none with --no-usage.
func (k kindConfig) usage(g generation) *usage {
	if k.noUsage {
		return nil
	}
	return g.usage()
}
