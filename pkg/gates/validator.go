package gates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// ValidatorResult turns the end of a protocol validator command into a
// verdict. The validator may print, as the last non-empty line of its
// standard output, one JSON object:
//
//	{"verdict": "pass"|"fail"|"error", "detail": "...", "figures": {"name": number, ...}, "class": "profile-artifact"}
//
// "class" says what kind of failure a failing verdict is (Verdict.Class);
// ClassProfileArtifact, ClassQuality and ClassInfrastructure are known,
// any other value is ignored.
//
// Rules, in order:
//
//   - A signal (signal != "") or a non-zero exit fails, with the exit in
//     the detail, whatever the JSON says; the JSON's detail and figures are
//     still carried.
//   - Exit 0 with a JSON last line carrying "verdict" takes that verdict,
//     its detail and figures. A "verdict" that is not one of the three
//     words is an error verdict: a validator that meant to fail must not
//     pass by misspelling it.
//   - Exit 0 otherwise passes. A last line that is not a JSON object
//     (malformed, truncated, plain text) is ignored and the exit code
//     decides: validators that print nothing structured keep working, and
//     a validator that wants to fail with exit 0 must print valid JSON.
//   - Figures that are not numbers are dropped and named in the detail.
//     The figure exit_code is always the exit code and overrides a figure
//     of that name from the validator.
//
// The gate is named "validator:" + name. A fail or error fails the run
// with reason validator-failed; whether the campaign stops is the
// protocol's rule for that validator.
func ValidatorResult(name string, exitCode int, signal string, stdout []byte, now time.Time) Verdict {
	v := Verdict{Gate: "validator:" + name, Verdict: Pass, At: now, Figures: map[string]float64{}}
	rep, ok := parseValidatorLine(lastLine(stdout))
	var notes []string
	if ok {
		for k, n := range rep.figures {
			v.Figures[k] = n
		}
		if len(rep.dropped) > 0 {
			notes = append(notes, "non-numeric figures dropped: "+strings.Join(rep.dropped, ", "))
		}
	}
	v.Figures["exit_code"] = float64(exitCode)
	if ok {
		v.Class = rep.class
	}
	switch {
	case signal != "" || exitCode != 0:
		v.Verdict = Fail
		exit := fmt.Sprintf("exit status %d", exitCode)
		if signal != "" {
			exit = "killed by signal " + signal
		}
		d := []string{exit}
		if ok && rep.detail != "" {
			d = append(d, rep.detail)
		}
		v.Detail = strings.Join(append(d, notes...), "; ")
		return v
	case ok && rep.hasVerdict:
		switch rep.verdict {
		case Pass, Fail, Error:
			v.Verdict = rep.verdict
			v.Detail = strings.Join(append(nonEmpty(rep.detail), notes...), "; ")
		default:
			v.Verdict = Error
			v.Detail = strings.Join(append([]string{fmt.Sprintf("validator reported unknown verdict %q", rep.verdict)}, append(nonEmpty(rep.detail), notes...)...), "; ")
		}
		return v
	default:
		if ok {
			v.Detail = strings.Join(append(nonEmpty(rep.detail), notes...), "; ")
		}
		return v
	}
}

type validatorReport struct {
	hasVerdict bool
	verdict    string
	detail     string
	figures    map[string]float64
	dropped    []string // names of figures that were not numbers, sorted
	class      string
}

// parseValidatorLine reads a validator's JSON line. ok is false when the
// line is not a JSON object. Fields of the wrong type are ignored, except
// a non-string "verdict", which is reported as an unknown verdict.
func parseValidatorLine(line []byte) (validatorReport, bool) {
	var r validatorReport
	if len(line) == 0 || line[0] != '{' {
		return r, false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(line, &top); err != nil {
		return r, false
	}
	if raw, ok := top["verdict"]; ok {
		r.hasVerdict = true
		if err := json.Unmarshal(raw, &r.verdict); err != nil {
			r.verdict = string(raw)
		}
	}
	if raw, ok := top["class"]; ok {
		_ = json.Unmarshal(raw, &r.class)
		if r.class != ClassProfileArtifact && r.class != ClassQuality && r.class != ClassInfrastructure {
			r.class = ""
		}
	}
	if raw, ok := top["detail"]; ok {
		_ = json.Unmarshal(raw, &r.detail) // a non-string detail is ignored
	}
	if raw, ok := top["figures"]; ok {
		var figs map[string]json.RawMessage
		if json.Unmarshal(raw, &figs) == nil {
			r.figures = map[string]float64{}
			for k, fv := range figs {
				var n float64
				if err := json.Unmarshal(fv, &n); err != nil || string(bytes.TrimSpace(fv)) == "null" {
					r.dropped = append(r.dropped, k)
					continue
				}
				r.figures[k] = n
			}
			sort.Strings(r.dropped)
		}
	}
	return r, true
}

// lastLine returns the last non-empty line of b, trimmed of white space.
func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, " \t\r\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return bytes.TrimSpace(b)
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
