package loadgen

import (
	"fmt"
	"time"
)

// ServerKind is the server whose stream a run reads. The kinds differ in
// the field of a chat delta that carries reasoning text (docs/servers.md):
// vLLM's is "reasoning" (its DeltaMessage), SGLang's "reasoning_content".
// A chunk with a non-empty content or reasoning field carries a token.
type ServerKind string

const (
	// ServerAuto reads both reasoning fields.
	ServerAuto       ServerKind = "auto"
	ServerVLLM       ServerKind = "vllm"
	ServerSGLang     ServerKind = "sglang"
	ServerVLLMOmni   ServerKind = "vllm-omni"
	ServerSGLangOmni ServerKind = "sglang-omni"
)

// ParseServerKind reads a --server-kind value ("" is auto).
func ParseServerKind(s string) (ServerKind, error) {
	switch k := ServerKind(s); k {
	case "":
		return ServerAuto, nil
	case ServerAuto, ServerVLLM, ServerSGLang, ServerVLLMOmni, ServerSGLangOmni:
		return k, nil
	}
	return "", fmt.Errorf("%q: want vllm, sglang, vllm-omni, sglang-omni or auto", s)
}

// carriesReasoning reports whether the chat delta field key carries
// reasoning text for this kind: vLLM's "reasoning", SGLang's
// "reasoning_content", auto both.
func (k ServerKind) carriesReasoning(key string) bool {
	switch k {
	case ServerVLLM, ServerVLLMOmni:
		return key == "reasoning"
	case ServerSGLang, ServerSGLangOmni:
		return key == "reasoning_content"
	}
	return key == "reasoning" || key == "reasoning_content"
}

// countsWithoutUsage reports whether a stream of this kind may come
// without usage and its output is then counted from the stream: SGLang-Omni
// sends usage only where its pipeline's decode result carries one
// (docs/servers.md, "SGLang-Omni, usage"). Every other kind sends usage
// when asked (stream_options.include_usage), and a stream without it is
// invalid-output.
func (k ServerKind) countsWithoutUsage() bool { return k == ServerSGLangOmni }

// IdleKeepAlive is how long an idle connection is kept for the next
// request. It is shorter than the servers' own idle timeout (uvicorn's
// timeout_keep_alive, 5 s, which vLLM and SGLang keep), so the client
// closes an idle connection before the server does and never sends a
// request on a connection the server is closing.
const IdleKeepAlive = 4 * time.Second
