package loadgen

import (
	"bytes"

	"warden/pkg/jsonscan"
)

// scanLine reads a manifest line in one structural pass (jsonscan), for
// the lines whose meaning is plain: the six keys written exactly, once
// each, id and arrival strings of printable ASCII without escapes, counts
// that are integer literals, prompts that are not null, nothing after the
// object. ok is false for any other line, which decodeLine then gives to
// encoding/json (whose key matching ignores case, whose strings decode
// escapes), so both read every line alike; TestScanLineAgreesWithJSON
// holds them to it. promptOff is where the line's prompt value starts.
func scanLine(body []byte) (l manifestLine, promptOff int, ok bool) {
	seen := 0
	var in, out int
	ok = true
	start := jsonscan.SkipSpace(body, 0)
	end := jsonscan.Members(body, start, func(key, val []byte) {
		bit, known := manifestKey(key)
		if !ok || !known {
			return
		}
		if bit == 0 || seen&bit != 0 {
			ok = false // not written exactly, or repeated (encoding/json keeps the last)
			return
		}
		seen |= bit
		switch bit {
		case keyID:
			l.ID, ok = plainString(val)
		case keyArrival:
			l.Arrival, ok = plainString(val)
		case keyInput:
			in, ok = intLiteral(val)
			l.InputTokens = &in
		case keyOutput:
			out, ok = intLiteral(val)
			l.OutputTokens = &out
		case keyPrompt, keyPromptIDs:
			if ok = val[0] != 'n'; !ok {
				return
			}
			// val is a span of body: where it starts follows from its capacity.
			promptOff = cap(body) - cap(val)
			if bit == keyPrompt {
				l.Prompt = val
			} else {
				l.PromptTokenIDs = val
			}
		}
	})
	if end < 0 || jsonscan.SkipSpace(body, end) != len(body) {
		return manifestLine{}, 0, false
	}
	return l, promptOff, ok
}

// The keys scanLine reads, one bit each.
const (
	keyID = 1 << iota
	keyPrompt
	keyPromptIDs
	keyInput
	keyOutput
	keyArrival
)

var manifestKeys = map[string]int{"id": keyID, "prompt": keyPrompt, "prompt_token_ids": keyPromptIDs,
	"input_tokens": keyInput, "output_tokens": keyOutput, "arrival": keyArrival}

// manifestKey names a key's bit. known is false for a key that is none of
// the six; a key encoding/json could match to one of them without being
// written exactly (another case, an escape, a non-ASCII byte that folds)
// makes it true with bit 0, which fails the line's scan.
func manifestKey(key []byte) (bit int, known bool) {
	if b, ok := manifestKeys[string(key)]; ok {
		return b, true
	}
	for _, c := range key {
		if c == '\\' || c >= 0x80 {
			return 0, true
		}
	}
	for k := range manifestKeys {
		if bytes.EqualFold(key, []byte(k)) {
			return 0, true
		}
	}
	return 0, false
}

// plainString reads a JSON string of printable ASCII without escapes.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return "", false
		}
	}
	return string(v[1 : len(v)-1]), true
}

// intLiteral reads a JSON integer literal within int32 (larger counts are
// left to encoding/json, and refused later as a request's counts).
func intLiteral(v []byte) (int, bool) {
	n, ok := jsonscan.Int(v)
	if !ok || n < -1<<31 || n >= 1<<31 {
		return 0, false
	}
	return int(n), true
}
