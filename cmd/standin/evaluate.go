package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"warden/internal/cli"
)

// evalConfig is the stand-in evaluator's flags.
type evalConfig struct {
	resultDir string
	metric    string
	score     float64
	max, min  float64
	data      string
	evaluator string
	seed      int64
	// outputs is loadgen's quality-pass directory: the score is computed
	// from its kept audio (scoreOutputs) instead of given.
	outputs string
}

// evalVerdict is the verdict line of docs/validators.md's quality
// evaluator contract.
type evalVerdict struct {
	Verdict string             `json:"verdict"`
	Detail  string             `json:"detail"`
	Figures map[string]float64 `json:"figures"`
	Class   string             `json:"class,omitempty"`
}

func newEvaluateCmd() *cobra.Command {
	cfg := evalConfig{max: math.NaN(), min: math.NaN()}
	cmd := &cobra.Command{
		Use:   "evaluate",
		Short: "Run a STAND-IN quality evaluator (tests and demos only; it scores nothing)",
		Long: `Run a STAND-IN for an operator's quality evaluator (WER/CER, UTMOS, speaker
similarity), following the evaluator contract of docs/validators.md. With
--score it scores NO output: the score is given by the test, so that a test
can make one system pass its quality gate and another fail it. With
--outputs (loadgen's --quality-dir) it scores the kept streamed audio:
silence_ratio, duration_s or sample_rate.

It reads loadgen's DIR/result.json: the run must have ended with at least one
request of class success (the requests an evaluator would score), else the
verdict is error (the evaluator cannot tell). With a score above --max (or
below --min) the verdict is fail with "class": "quality"; otherwise pass.
The figures are the score under --metric, the bound, scored_requests and the
seed.

Exit codes: 0 whenever a verdict was reached (the last line says which); 2 a
usage error (no verdict line).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.check(); err != nil {
				return &cli.ExitError{Code: 2, Err: err}
			}
			return writeVerdict(cmd.OutOrStdout(), evaluate(cfg))
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.resultDir, "result-dir", "", "loadgen's result directory (required)")
	f.StringVar(&cfg.metric, "metric", "", "the metric's name, e.g. wer, utmos (required)")
	f.Float64Var(&cfg.score, "score", math.NaN(), "the stand-in's score (required)")
	f.Float64Var(&cfg.max, "max", math.NaN(), "fail when the score is above this bound (WER, CER)")
	f.Float64Var(&cfg.min, "min", math.NaN(), "fail when the score is below this bound (UTMOS, speaker similarity)")
	f.StringVar(&cfg.data, "data", "", "the locked evaluation data (named in the detail)")
	f.StringVar(&cfg.evaluator, "evaluator", "", "the locked evaluator model (named in the detail)")
	f.Int64Var(&cfg.seed, "seed", 0, "the evaluator's seed (a figure)")
	f.StringVar(&cfg.outputs, "outputs", "", "loadgen's --quality-dir: score --metric (silence_ratio, duration_s, sample_rate) from the kept streamed audio instead of --score")
	return cmd
}

func (c evalConfig) check() error {
	switch {
	case c.resultDir == "" || c.metric == "":
		return errors.New("evaluate: --result-dir and --metric are required")
	case c.outputs != "" && !math.IsNaN(c.score):
		return errors.New("evaluate: --outputs computes the score: give no --score")
	case c.outputs != "" && !slices.Contains(outputMetrics, c.metric):
		return fmt.Errorf("evaluate: --outputs scores %v, not %q", outputMetrics, c.metric)
	case c.outputs == "" && (math.IsNaN(c.score) || math.IsInf(c.score, 0)):
		return errors.New("evaluate: --score is required and must be finite")
	case math.IsNaN(c.max) == math.IsNaN(c.min):
		return errors.New("evaluate: give exactly one of --max and --min")
	}
	return nil
}

// evaluate reads the run's result and judges the score against the bound.
func evaluate(c evalConfig) evalVerdict {
	v := evalVerdict{Figures: map[string]float64{}}
	var res struct {
		Totals struct {
			ByClass map[string]int `json:"by_class"`
		} `json:"totals"`
	}
	b, err := os.ReadFile(filepath.Join(c.resultDir, "result.json"))
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil {
		v.Verdict, v.Detail = "error", "no client result to evaluate: "+err.Error()
		return v
	}
	n := res.Totals.ByClass["success"]
	v.Figures["scored_requests"] = float64(n)
	if n == 0 {
		v.Verdict, v.Detail = "error", "no request of class success to evaluate"
		return v
	}
	if c.outputs != "" {
		score, scored, why := scoreOutputs(c.outputs, c.metric)
		if why != "" {
			v.Verdict, v.Detail = "error", why
			return v
		}
		c.score, n = score, scored
		v.Figures["scored_requests"] = float64(n)
	}
	v.Figures[c.metric] = c.score
	v.Figures["seed"] = float64(c.seed)
	bound, over := c.max, c.score > c.max
	word := "above the maximum"
	if !math.IsNaN(c.min) {
		bound, over, word = c.min, c.score < c.min, "below the minimum"
	}
	v.Figures["bound"] = bound
	locked := fmt.Sprintf("(data %q, evaluator %q, seed %d)", c.data, c.evaluator, c.seed)
	if over {
		v.Verdict, v.Class = "fail", "quality"
		v.Detail = fmt.Sprintf("%s %g %s %g over %d requests %s", c.metric, c.score, word, bound, n, locked)
		return v
	}
	v.Verdict = "pass"
	v.Detail = fmt.Sprintf("%s %g within %g over %d requests %s", c.metric, c.score, bound, n, locked)
	return v
}

// outputMetrics are what scoreOutputs computes.
var outputMetrics = []string{"silence_ratio", "duration_s", "sample_rate"}

// scoreOutputs computes metric over the streamed audio loadgen's quality
// pass kept in dir (NNNNNN.stream.wav: 16-bit PCM): silence_ratio, the
// share of samples within 1% of full scale of zero (seed 000 §4's 静音比例);
// duration_s, the mean duration; sample_rate, the one rate of every file
// (files of different rates: error). why says what kept it from scoring.
func scoreOutputs(dir, metric string) (score float64, n int, why string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.stream.wav"))
	if len(files) == 0 {
		return 0, 0, "no kept audio to evaluate in " + dir
	}
	var silent, total int64
	var dur float64
	rate := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 44 || string(b[0:4]) != "RIFF" || binary.LittleEndian.Uint16(b[34:]) != 16 {
			return 0, 0, fmt.Sprintf("%s is not a 16-bit PCM WAV file", filepath.Base(p))
		}
		r := int(binary.LittleEndian.Uint32(b[24:]))
		if rate != 0 && r != rate {
			return 0, 0, fmt.Sprintf("kept audio of two sample rates, %d and %d", rate, r)
		}
		rate = r
		data := b[44:]
		for i := 0; i+1 < len(data); i += 2 {
			if x := int16(binary.LittleEndian.Uint16(data[i:])); x > -328 && x < 328 {
				silent++
			}
		}
		total += int64(len(data) / 2)
		dur += float64(len(data)/2) / float64(r)
	}
	switch metric {
	case "silence_ratio":
		if total == 0 {
			return 0, 0, "the kept audio has no samples"
		}
		return float64(silent) / float64(total), len(files), ""
	case "duration_s":
		return dur / float64(len(files)), len(files), ""
	}
	return float64(rate), len(files), ""
}

func writeVerdict(w io.Writer, v evalVerdict) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
