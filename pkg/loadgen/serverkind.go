package loadgen

import (
	"bytes"
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

// reasoningKeys are the chat delta fields that carry reasoning text, as
// the stream's JSON keys.
func (k ServerKind) reasoningKeys() []string {
	switch k {
	case ServerVLLM, ServerVLLMOmni:
		return []string{`"reasoning":`}
	case ServerSGLang, ServerSGLangOmni:
		return []string{`"reasoning_content":`}
	}
	return []string{`"reasoning":`, `"reasoning_content":`}
}

// tokenKeys are the keys whose non-empty string value makes a chunk a
// token chunk: completions' text, chat's content, and the kind's
// reasoning fields.
func (k ServerKind) tokenKeys() []string {
	switch k {
	case ServerVLLM, ServerVLLMOmni:
		return vllmTokenKeys
	case ServerSGLang, ServerSGLangOmni:
		return sglangTokenKeys
	}
	return autoTokenKeys
}

var (
	vllmTokenKeys   = append([]string{`"text":`, `"content":`}, ServerVLLM.reasoningKeys()...)
	sglangTokenKeys = append([]string{`"text":`, `"content":`}, ServerSGLang.reasoningKeys()...)
	autoTokenKeys   = append([]string{`"text":`, `"content":`}, ServerAuto.reasoningKeys()...)
)

// IdleKeepAlive is how long an idle connection is kept for the next
// request. It is shorter than the servers' own idle timeout (uvicorn's
// timeout_keep_alive, 5 s, which vLLM and SGLang keep), so the client
// closes an idle connection before the server does and never sends a
// request on a connection the server is closing.
const IdleKeepAlive = 4 * time.Second

// reasons reports whether a decoded delta's reasoning fields carry text,
// for this kind.
func (k ServerKind) reasons(reasoning, reasoningContent string) bool {
	switch k {
	case ServerVLLM, ServerVLLMOmni:
		return reasoning != ""
	case ServerSGLang, ServerSGLangOmni:
		return reasoningContent != ""
	}
	return reasoning != "" || reasoningContent != ""
}

// hasChoices reports whether a chunk has a non-empty "choices" array: the
// chunk at which vLLM's benchmark client takes its time to first token
// (a chat stream's first chunk, carrying only the role, counts there).
func hasChoices(p []byte) bool {
	i := bytes.Index(p, []byte(`"choices":`))
	if i < 0 {
		return false
	}
	rest := skipSpace(p[i+len(`"choices":`):])
	if len(rest) < 2 || rest[0] != '[' {
		return false
	}
	rest = skipSpace(rest[1:])
	return len(rest) > 0 && rest[0] != ']'
}
