package loadgen

import "warden/pkg/jsonscan"

// chunk is what the client reads from one streamed chunk (completions or
// chat), in one pass over its bytes and without building anything.
type chunk struct {
	// token: a choice carries a non-empty text, delta content, or the
	// server kind's delta reasoning field.
	token bool
	// choices: "choices" is a non-empty array: the chunk at which vLLM's
	// benchmark client takes its time to first token (a chat stream's
	// first chunk, carrying only the role, counts there).
	choices bool
	// usage: "usage" is an object; its two counts follow.
	usage                bool
	promptTokens, output int
	// errorEvent: a non-null "error", or "object": "error".
	errorEvent bool
	// audio: the chunk carries audio (audio.go): a top-level "modality"
	// of "audio" (audioModality: vLLM-Omni, whose delta content is then
	// the audio, not a token) or a delta "audio" object (SGLang-Omni).
	audio, audioModality bool
}

// Reasons readChunk gives for a chunk that is not a completion chunk.
const (
	notObject = "a stream chunk is not a JSON object"
	wrongType = "a stream chunk is not JSON of the completion chunk's types"
)

// readChunk reads one chunk's payload. The whole payload must be one JSON
// object (checked byte by byte, as strictly as encoding/json); the
// members the client reads must have their types: "object" and "message"
// a string, "choices" an array of objects, a choice's "text" and
// "finish_reason" a string, its "delta" an object of strings, "usage" an
// object whose prompt_tokens and completion_tokens are integers (null is
// each of these, as absent). Keys match exactly. why is "" for a chunk
// that passes.
func readChunk(p []byte, kind ServerKind) (c chunk, why string) {
	ok := true
	end := jsonscan.Members(p, 0, func(key, val []byte) {
		switch string(key) {
		case "object":
			ok = ok && isStringOrNull(val)
			c.errorEvent = c.errorEvent || string(val) == `"error"`
		case "message":
			ok = ok && isStringOrNull(val)
		case "error":
			c.errorEvent = c.errorEvent || string(val) != "null"
		case "usage":
			ok = ok && c.readUsage(val)
		case "choices":
			ok = ok && c.readChoices(val, kind)
		case "modality":
			ok = ok && isStringOrNull(val)
			c.audioModality = string(val) == `"audio"`
		}
	})
	switch {
	case end < 0 || end != len(p):
		return chunk{}, notObject
	case !ok:
		return chunk{}, wrongType
	}
	if c.audioModality {
		// vLLM-Omni: the delta content of an audio chunk is the audio.
		c.token, c.audio = false, true
	}
	return c, ""
}

func isStringOrNull(v []byte) bool { return v[0] == '"' || v[0] == 'n' }

// nonEmpty: a string value of at least one character (any escape decodes
// to one).
func nonEmpty(v []byte) bool { return len(v) > 2 && v[0] == '"' }

func (c *chunk) readUsage(v []byte) bool {
	if v[0] == 'n' {
		c.usage = false
		return true
	}
	if v[0] != '{' {
		return false
	}
	c.usage, c.promptTokens, c.output = true, 0, 0
	ok := true
	count := func(dst *int, val []byte) {
		if val[0] == 'n' {
			return
		}
		n, isInt := jsonscan.Int(val)
		ok = ok && isInt
		*dst = int(n)
	}
	jsonscan.Members(v, 0, func(key, val []byte) {
		switch string(key) {
		case "prompt_tokens":
			count(&c.promptTokens, val)
		case "completion_tokens":
			count(&c.output, val)
		}
	})
	return ok
}

func (c *chunk) readChoices(v []byte, kind ServerKind) bool {
	if v[0] == 'n' {
		return true
	}
	if v[0] != '[' {
		return false
	}
	ok := true
	c.choices, c.token = false, false
	jsonscan.Items(v, 0, func(choice []byte) {
		c.choices = true
		switch choice[0] {
		case 'n':
			return
		case '{':
		default:
			ok = false
			return
		}
		jsonscan.Members(choice, 0, func(key, val []byte) {
			switch string(key) {
			case "text":
				ok = ok && isStringOrNull(val)
				c.token = c.token || nonEmpty(val)
			case "finish_reason":
				ok = ok && isStringOrNull(val)
			case "delta":
				ok = ok && c.readDelta(val, kind)
			}
		})
	})
	return ok
}

func (c *chunk) readDelta(v []byte, kind ServerKind) bool {
	if v[0] == 'n' {
		return true
	}
	if v[0] != '{' {
		return false
	}
	ok := true
	jsonscan.Members(v, 0, func(key, val []byte) {
		switch string(key) {
		case "content", "reasoning", "reasoning_content":
			ok = ok && isStringOrNull(val)
			if nonEmpty(val) && (string(key) == "content" || kind.carriesReasoning(string(key))) {
				c.token = true
			}
		case "audio":
			ok = ok && (val[0] == '{' || val[0] == 'n')
			c.audio = c.audio || val[0] == '{'
		}
	})
	return ok
}
