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
//   - sglang (and sglang-omni): GET /server_info and its deprecated alias
//     GET /get_server_info in SGLang's shape: the server arguments at the
//     top level, max_running_requests null unless --max-running-requests
//     was given, the effective value at
//     internal_states[0].effective_max_running_requests_per_dp; a chat
//     delta's reasoning text is "reasoning_content".
//   - sglang-omni: a chat stream ends with a finish chunk of its own (an
//     empty delta, the finish reason and the usage) and ignores
//     stream_options.
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
}

func addKindFlags(f *pflag.FlagSet, k *kindConfig) {
	f.StringVar(&k.kind, "server-kind", kindVLLM, "the real server's behaviour to follow: vllm, vllm-omni, sglang, sglang-omni (config endpoint, reasoning field, usage chunk)")
	f.IntVar(&k.reasoningTokens, "reasoning-tokens", 0, "chat streams send their first N tokens as reasoning text, in the kind's field (vLLM: reasoning, SGLang: reasoning_content)")
	f.Float64Var(&k.idleTimeoutS, "idle-timeout-s", 5, "close a kept-alive connection idle this long (uvicorn's timeout_keep_alive, 5 s)")
	f.IntVar(&k.maxRunningRequests, "max-running-requests", -1, "SGLang's --max-running-requests as given (reported as max_running_requests; null when not given)")
	addAudioFlags(f, &k.audio)
}

func (k kindConfig) validate() error {
	if !slices.Contains(serverKinds, k.kind) {
		return fmt.Errorf("--server-kind %q: want one of %v", k.kind, serverKinds)
	}
	if k.reasoningTokens < 0 || k.idleTimeoutS <= 0 {
		return fmt.Errorf("--reasoning-tokens must not be negative and --idle-timeout-s must be positive")
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
