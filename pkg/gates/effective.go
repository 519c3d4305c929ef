package gates

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"warden/pkg/safefile"
)

// MaxServerLogBytes bounds how much of each of server.out and server.err
// ReadServerLog reads. The effective configuration is printed at startup,
// so the head of the log is the part that matters.
const MaxServerLogBytes = 16 << 20

// Expect is one expected effective value: a name for people and an RE2
// regular expression (Go's regexp syntax) that the server's startup log
// must match somewhere.
type Expect struct {
	Name    string
	Pattern string
}

// EffectiveConfig checks that the server's startup log shows every
// expected effective value: each Expect's pattern must match logText.
//
// Verdicts: pass when every pattern matches (also when there is nothing to
// expect); fail when one or more do not, the detail naming each missing
// expectation with its pattern; error when a pattern does not compile,
// naming it (no pattern is then judged).
//
// Figures: expected (number of expectations), matched.
//
// A fail is the seed's "effective config mismatch": the caller fails the
// run and stops the campaign for review. An error is a protocol fault: the
// caller stops too, as it cannot tell what the server ran with.
func EffectiveConfig(logText []byte, expects []Expect, now time.Time) Verdict {
	v := Verdict{Gate: "effective-config", Verdict: Pass, At: now,
		Figures: map[string]float64{"expected": float64(len(expects)), "matched": 0}}
	res := make([]*regexp.Regexp, len(expects))
	var bad []string
	for i, e := range expects {
		re, err := regexp.Compile(e.Pattern)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", e.Name, err))
			continue
		}
		res[i] = re
	}
	if len(bad) > 0 {
		v.Verdict = Error
		v.Detail = "bad expectation pattern: " + strings.Join(bad, "; ")
		return v
	}
	var missing []string
	for i, e := range expects {
		if res[i].Match(logText) {
			v.Figures["matched"]++
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (/%s/)", e.Name, e.Pattern))
	}
	if len(missing) > 0 {
		v.Verdict = Fail
		v.Detail = "the server's startup log does not show the expected effective values: " + strings.Join(missing, ", ")
	}
	return v
}

// ReadServerLog reads the server's output of an attempt directory:
// server.out then server.err, at most MaxServerLogBytes of each, joined by
// a newline (so a pattern anchored with (?m)^ sees the start of the second
// file). A missing file reads as empty; when both are missing the error
// wraps fs.ErrNotExist.
func ReadServerLog(attemptDir string) ([]byte, error) {
	var out []byte
	found := 0
	for i, name := range []string{"server.out", "server.err"} {
		path := filepath.Join(attemptDir, name)
		b, err := readHead(path, MaxServerLogBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read server log %s: %w", path, err)
		}
		found++
		if i > 0 && len(out) > 0 {
			out = append(out, '\n')
		}
		out = append(out, b...)
	}
	if found == 0 {
		return nil, fmt.Errorf("read server log in %s: neither server.out nor server.err: %w", attemptDir, fs.ErrNotExist)
	}
	return out, nil
}

// EffectiveConfigDir is EffectiveConfig on ReadServerLog(attemptDir). A log
// that cannot be read is an error verdict, unless nothing is expected.
func EffectiveConfigDir(attemptDir string, expects []Expect, now time.Time) Verdict {
	if len(expects) == 0 {
		return EffectiveConfig(nil, nil, now)
	}
	text, err := ReadServerLog(attemptDir)
	if err != nil {
		return Verdict{Gate: "effective-config", Verdict: Error, Detail: err.Error(), At: now,
			Figures: map[string]float64{"expected": float64(len(expects)), "matched": 0}}
	}
	return EffectiveConfig(text, expects, now)
}

// readHead reads at most limit bytes from the start of a file.
func readHead(path string, limit int64) ([]byte, error) {
	f, err := safefile.Open(path) // the server may have replaced it
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
