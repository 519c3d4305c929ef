package gates

import (
	"testing"
	"time"
)

func TestValidatorResult(t *testing.T) {
	now := time.Date(2026, 7, 13, 1, 2, 3, 0, time.UTC)
	cases := []struct {
		name    string
		exit    int
		signal  string
		stdout  string
		verdict string
		figures map[string]float64
		detail  []string // substrings the detail must hold
	}{
		{"exit 0, no output", 0, "", "", Pass, map[string]float64{"exit_code": 0}, nil},
		{"exit 0, plain text", 0, "", "checked 12 files\nall good\n", Pass, map[string]float64{"exit_code": 0}, nil},
		{"JSON pass with figures", 0, "", "log line\n{\"verdict\":\"pass\",\"figures\":{\"records\":1200,\"dropped\":0}}\n", Pass,
			map[string]float64{"exit_code": 0, "records": 1200, "dropped": 0}, nil},
		{"JSON fail with exit 0", 0, "", "{\"verdict\": \"fail\", \"detail\": \"footer written 10 != records 9\", \"figures\": {\"written\": 10, \"records\": 9}}\n\n  \n", Fail,
			map[string]float64{"exit_code": 0, "written": 10, "records": 9}, []string{"footer written 10 != records 9"}},
		{"JSON error", 0, "", "{\"verdict\":\"error\",\"detail\":\"sidecar missing\"}", Error, map[string]float64{"exit_code": 0}, []string{"sidecar missing"}},
		{"JSON without verdict: exit decides, figures kept", 0, "", "{\"figures\":{\"steps\":3}}", Pass, map[string]float64{"exit_code": 0, "steps": 3}, nil},
		{"malformed JSON ignored", 0, "", "{\"verdict\": \"fail\", \"figures\": {\"x\": 1}\n", Pass, map[string]float64{"exit_code": 0}, nil},
		{"JSON not on the last line ignored", 0, "", "{\"verdict\":\"fail\"}\ndone\n", Pass, map[string]float64{"exit_code": 0}, nil},
		{"JSON array is not a report", 0, "", "[\"fail\"]", Pass, map[string]float64{"exit_code": 0}, nil},
		{"unknown verdict is an error", 0, "", "{\"verdict\":\"FAILED\"}", Error, map[string]float64{"exit_code": 0}, []string{`unknown verdict "FAILED"`}},
		{"non-string verdict is an error", 0, "", "{\"verdict\":false}", Error, map[string]float64{"exit_code": 0}, []string{`unknown verdict "false"`}},
		{"non-numeric figures dropped", 0, "", "{\"verdict\":\"pass\",\"figures\":{\"ok\":1,\"name\":\"x\",\"bad\":null}}", Pass,
			map[string]float64{"exit_code": 0, "ok": 1}, []string{"non-numeric figures dropped: bad, name"}},
		{"exit_code figure is the exit code", 0, "", "{\"verdict\":\"pass\",\"figures\":{\"exit_code\":7}}", Pass, map[string]float64{"exit_code": 0}, nil},
		{"non-zero exit fails whatever the JSON says", 3, "", "{\"verdict\":\"pass\",\"detail\":\"looked fine\",\"figures\":{\"n\":2}}", Fail,
			map[string]float64{"exit_code": 3, "n": 2}, []string{"exit status 3", "looked fine"}},
		{"non-zero exit, no output", 1, "", "", Fail, map[string]float64{"exit_code": 1}, []string{"exit status 1"}},
		{"signal fails", -1, "killed", "", Fail, map[string]float64{"exit_code": -1}, []string{"killed by signal killed"}},
		{"signal with exit 0 fails", 0, "SIGTERM", "{\"verdict\":\"pass\"}", Fail, map[string]float64{"exit_code": 0}, []string{"killed by signal SIGTERM"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := ValidatorResult("layer1", c.exit, c.signal, []byte(c.stdout), now)
			if v.Verdict != c.verdict || v.Gate != "validator:layer1" || !v.At.Equal(now) {
				t.Fatalf("got %+v, want verdict %s", v, c.verdict)
			}
			if len(v.Figures) != len(c.figures) {
				t.Errorf("figures %v, want %v", v.Figures, c.figures)
			}
			checkFigures(t, v.Figures, c.figures, 0)
			checkDetail(t, v.Detail, c.detail, nil)
			if len(c.detail) == 0 && v.Detail != "" {
				t.Errorf("unexpected detail %q", v.Detail)
			}
		})
	}
}

// A validator can say that its failure is a broken profile artifact; any
// other class is ignored (the failure is the run's own).
func TestValidatorClass(t *testing.T) {
	now := time.Now()
	cases := []struct{ stdout, class string }{
		{`{"verdict":"fail","class":"profile-artifact","detail":"window 2: trace not gzip"}`, ClassProfileArtifact},
		{`{"verdict":"fail","class":"whatever"}`, ""},
		{`{"verdict":"fail"}`, ""},
		{`not json`, ""},
	}
	for _, tc := range cases {
		if v := ValidatorResult("layer2", 0, "", []byte(tc.stdout), now); v.Class != tc.class {
			t.Errorf("%s: class %q, want %q", tc.stdout, v.Class, tc.class)
		}
	}
}
