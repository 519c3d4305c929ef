package gates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ConfigExpect is one expected value of the configuration a server
// reports through its own API: a dotted JSON path into the document (an
// object key per element; a number, or [N], indexes an array:
// internal_states.0.x and internal_states[0].x are the same path) and the
// value it must hold, as JSON.
//
// The documents, as the servers serve them:
//   - vLLM, GET /server_info?config_format=json (served when
//     VLLM_SERVER_DEV_MODE=1): {"vllm_config": <VllmConfig as JSON>,
//     "vllm_env": {...}, "system_env": {...}}; e.g.
//     vllm_config.scheduler_config.max_num_seqs (vLLM,
//     vllm/entrypoints/serve/instrumentator/server_info.py, main at
//     09cb327f).
//   - SGLang, GET /server_info (GET /get_server_info is its deprecated
//     alias): the server arguments at the top level, plus
//     "internal_states" (one per DP rank, from the scheduler) and
//     "version". A server argument is reported as given: max_running_requests
//     is null unless --max-running-requests was passed; the effective
//     value is internal_states.0.effective_max_running_requests_per_dp
//     (docs/servers.md cites the sources).
type ConfigExpect struct {
	Name   string
	Path   string
	Equals json.RawMessage
}

// ServerConfig checks the configuration document a server reported
// against the expectations.
//
// Verdicts: pass when every path holds its value; fail when one or more
// differ or are missing, the detail naming each with what was found; error
// when the document is not a JSON object (the server's answer cannot be
// judged). Numbers compare as numbers (1024 equals 1024.0), everything
// else as canonical JSON.
//
// Figures: expected, matched, and for each expectation whose value is a
// number, the value found (under its name).
func ServerConfig(doc []byte, expects []ConfigExpect, now time.Time) Verdict {
	v := Verdict{Gate: "effective-config", Verdict: Pass, At: now,
		Figures: map[string]float64{"expected": float64(len(expects)), "matched": 0}}
	var root any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		v.Verdict, v.Detail = Error, "the server's configuration is not JSON: "+err.Error()
		return v
	}
	if _, ok := root.(map[string]any); !ok {
		v.Verdict, v.Detail = Error, "the server's configuration is not a JSON object"
		return v
	}
	var bad []string
	for _, e := range expects {
		got, err := lookup(root, e.Path)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %s %v", e.Name, e.Path, err))
			continue
		}
		if n, ok := got.(json.Number); ok {
			if f, err := n.Float64(); err == nil {
				v.Figures[e.Name] = f
			}
		}
		want, err := decodeNumber(e.Equals)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: the expected value %s is not JSON", e.Name, e.Equals))
			continue
		}
		if !sameJSON(got, want) {
			g, _ := json.Marshal(got)
			bad = append(bad, fmt.Sprintf("%s: %s is %s, want %s%s", e.Name, e.Path, g, e.Equals, nullHint(got, e.Path)))
			continue
		}
		v.Figures["matched"]++
	}
	if len(bad) > 0 {
		v.Verdict = Fail
		v.Detail = "effective configuration differs: " + strings.Join(bad, "; ")
	}
	return v
}

func decodeNumber(b []byte) (any, error) {
	var x any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	err := dec.Decode(&x)
	return x, err
}

// nullHint explains a null where a value was expected: the server did not
// report one there, as SGLang reports a server argument that was not given.
func nullHint(got any, path string) string {
	if got != nil {
		return ""
	}
	if strings.HasSuffix(path, "max_running_requests") {
		return " (SGLang reports max_running_requests as given, null without --max-running-requests; its effective value is internal_states.0.effective_max_running_requests_per_dp)"
	}
	return " (the server reports no value at this path)"
}

// pathElements splits a path at dots, an [N] index being one element.
func pathElements(path string) []string {
	path = strings.ReplaceAll(strings.ReplaceAll(path, "[", "."), "]", "")
	return strings.Split(path, ".")
}

// lookup follows a dotted path: object keys, and numbers as array indices.
func lookup(root any, path string) (any, error) {
	cur := root
	for _, el := range pathElements(path) {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[el]
			if !ok {
				return nil, fmt.Errorf("is missing (no %q)", el)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(el)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("is missing (no element %q of a list of %d)", el, len(c))
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("is missing (%q is under a value that is not an object)", el)
		}
	}
	return cur, nil
}

// sameJSON compares two decoded JSON values: numbers by value, the rest
// by their canonical encoding.
func sameJSON(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		af, err1 := an.Float64()
		bf, err2 := bn.Float64()
		return err1 == nil && err2 == nil && af == bf
	}
	ab, err1 := json.Marshal(a)
	bb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}
