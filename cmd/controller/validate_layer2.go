package main

import (
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"warden/pkg/contract"
)

func newValidateLayer2Cmd() *cobra.Command {
	var execPattern, mapping, layer1 string
	var tolMS float64
	o := contract.DefaultLayer2()
	var traces string
	cmd := verdictCmd("layer2", "Check the Layer-2 profiler traces of a run's profile windows",
		`layer2 checks every trace (--pattern, gzipped Chrome trace JSON) in --traces
by seed 002's Layer-2 rules (docs/validators.md):

  - shape: it decompresses and parses; its ProfilerStep numbers are exactly
    --warmup-iters .. --warmup-iters + --active-iters - 1 (2..9); it holds
    exactly --active-iters execute annotations inside those steps; it has
    kernels; every rank 0..--tp-1 has --windows traces;
  - composition: every kernel is given a family by the mapping table
    (--mapping, default the built-in v1; its name and SHA-256 are in the
    verdict); a window whose other + graph_replay_opaque share is above
    --max-other-opaque (0.30) is not classifiable;
  - the join: every execute annotation joins to exactly one record of the
    Layer-1 stream (--layer1) by time, order and token counts, within the
    window's bounds from the client's phase file (--phases);
  - CUDA-graph modes: each joined step's runtime_mode is FULL, PIECEWISE or
    NONE; a --require-mode segment needs eight active steps;
  - representativeness: |SMD| <= --max-smd (0.25) against the clean segment
    before the first window (--representativeness literal, the seed's); with
    --representativeness calibrated (a dated amendment's rule), a feature
    fails a window only when its |SMD| is also over its threshold at the
    --calibration-quantile of clean segment C's own --active-iters-step
    blocks (docs/validators.md). Either way the verdict reports the literal
    rule's false-failure rate on C's own blocks (smd.self.*).

A failing or erroring verdict carries "class":"profile-artifact" (the seed's
one exact rerun) unless a failure is stop condition 7 (not classifiable, too
few steps for a required mode), which stops for review. --analysis-out
writes the per-window shares, join and SMD as JSON.`,
		func() (contract.Result, error) {
			if traces == "" {
				return contract.Result{}, usage("layer2: --traces DIR is required")
			}
			re, err := regexp.Compile(execPattern)
			if err != nil {
				return contract.Result{}, usage("layer2: --execute-pattern: %v", err)
			}
			o.ExecuteAnnotate = re
			if o.TP < 1 || o.Windows < 0 || o.ActiveIters < 1 || o.WarmupIters < 0 || tolMS <= 0 || o.MaxOtherOpaque < 0 || o.MaxSMD <= 0 {
				return contract.Result{}, usage("layer2: --tp and --active-iters must be at least 1, --windows and --warmup-iters not negative, tolerances positive")
			}
			if err := checkRule("layer2: --representativeness", o.Representativeness.Rule, o.Representativeness.Quantile); err != nil {
				return contract.Result{}, err
			}
			for _, m := range o.RequireModes {
				if m != "FULL" && m != "PIECEWISE" && m != "NONE" {
					return contract.Result{}, usage("layer2: --require-mode %q: FULL, PIECEWISE or NONE", m)
				}
			}
			o.JoinTolerance = time.Duration(tolMS * float64(time.Millisecond))
			if mapping != "" {
				m, err := contract.LoadMapping(mapping)
				if err != nil {
					// the table the protocol names cannot be read: no verdict can name it
					r := contract.Result{Verdict: "error", Detail: err.Error(), Class: "profile-artifact"}
					return r, nil
				}
				o.Mapping = m
			}
			o.Layer1 = layer1Stream(layer1)
			return contract.Layer2Dir(traces, o), nil
		})
	f := cmd.Flags()
	f.StringVar(&traces, "traces", "", "directory of the run's trace files")
	f.IntVar(&o.TP, "tp", o.TP, "tensor-parallel ranks: trace files expected per window")
	f.IntVar(&o.Windows, "windows", o.Windows, "profile windows expected per rank (0: any)")
	f.IntVar(&o.WarmupIters, "warmup-iters", o.WarmupIters, "profiler warm-up iterations (not recorded)")
	f.IntVar(&o.ActiveIters, "active-iters", o.ActiveIters, "profiler active iterations")
	f.StringVar(&o.Pattern, "pattern", o.Pattern, "file name pattern of the traces")
	f.StringVar(&execPattern, "execute-pattern", o.ExecuteAnnotate.String(), "regular expression of an execute annotation's name (cat user_annotation)")
	f.StringVar(&mapping, "mapping", "", "kernel-to-family mapping table (YAML; default the built-in opfamily v1)")
	f.StringVar(&layer1, "layer1", "", "the run's Layer-1 stream, or a directory holding exactly one *.jsonl")
	f.StringVar(&o.Phases, "phases", os.Getenv("WARDEN_PHASE_FILE"), "the load client's phase file (default $WARDEN_PHASE_FILE)")
	f.Float64Var(&tolMS, "join-tolerance-ms", float64(o.JoinTolerance)/float64(time.Millisecond), "how far a Layer-1 submit time may be from its annotation once the clocks' offset is fixed")
	f.Float64Var(&o.MaxOtherOpaque, "max-other-opaque", o.MaxOtherOpaque, "largest other + graph_replay_opaque share of a classifiable window")
	f.Float64Var(&o.MaxSMD, "max-smd", o.MaxSMD, "largest |SMD| of a representative window")
	f.StringSliceVar(&o.RequireModes, "require-mode", nil, "CUDA-graph mode segments that need eight active steps (FULL, PIECEWISE, NONE)")
	f.StringVar(&o.AnalysisOut, "analysis-out", "", "write the per-window analysis (JSON) here")
	ruleFlags(f, "representativeness", &o.Representativeness.Rule, &o.Representativeness.Quantile)
	return cmd
}

// ruleFlags defines a statistical gate's rule and the calibrated rule's
// quantile.
func ruleFlags(f *pflag.FlagSet, name string, rule *string, q *float64) {
	f.StringVar(rule, name, *rule, "the rule: literal (the seed's) or calibrated (an amendment's: the limit widened to the quantile of the run's own clean data)")
	f.Float64Var(q, "calibration-quantile", *q, "the calibrated rule's quantile: the clean data's own samples pass jointly with at least this probability")
}

// checkRule refuses an unknown rule or a quantile outside (0, 1).
func checkRule(what, rule string, q float64) error {
	if rule != contract.RuleLiteral && rule != contract.RuleCalibrated {
		return usage("%s %q: literal or calibrated", what, rule)
	}
	if !(q > 0 && q < 1) {
		return usage("%s: --calibration-quantile %g: must be in (0, 1)", what, q)
	}
	return nil
}

// layer1Stream: a directory names its one *.jsonl; anything else is used
// as given (a missing stream is the check's error to report).
func layer1Stream(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		if m, _ := filepath.Glob(filepath.Join(p, "*.jsonl")); len(m) == 1 {
			return m[0]
		}
		return filepath.Join(p, "*.jsonl (none or several)")
	}
	return p
}

func newValidateColocationCmd() *cobra.Command {
	var mapping string
	var solo, coloc struct{ traces, layer1, phases string }
	tol := 0.03
	cmd := verdictCmd("colocation", "Compare the solo and co-located targets' operator shares (A-P3-1 item 4, F3)",
		`colocation computes, with one mapping table (--mapping, default the built-in
v1), the operator-family shares of the solo target's and the co-located
target's Layer-2 validation windows (one window each, TP1), after both have
passed every Layer-2 rule (layer2's shape, classifiability, join and SMD
checks). F3 is the three families with the greatest share in the solo
window (attention counted as its total; other and graph_replay_opaque are
not families); the check passes only if, for each, abs(share_coloc -
share_solo) < --share-tolerance (0.03: three percentage points, absolute).

A protocol names it as its co-location gate's validator; the gate compares
throughput itself. Figures: solo.F, coloc.F and diff_F for each F of F3.`,
		func() (contract.Result, error) {
			if solo.traces == "" || coloc.traces == "" {
				return contract.Result{}, usage("colocation: --solo-traces and --coloc-traces are required")
			}
			if tol <= 0 {
				return contract.Result{}, usage("colocation: --share-tolerance must be positive")
			}
			o := contract.DefaultLayer2()
			o.Windows = 1
			if mapping != "" {
				m, err := contract.LoadMapping(mapping)
				if err != nil {
					return contract.Result{Verdict: "error", Detail: err.Error()}, nil
				}
				o.Mapping = m
			}
			so, co := o, o
			so.Layer1, so.Phases = layer1Stream(solo.layer1), solo.phases
			co.Layer1, co.Phases = layer1Stream(coloc.layer1), coloc.phases
			r := contract.ColocationShares(solo.traces, coloc.traces, so, co, tol, time.Now())
			return r, nil
		})
	f := cmd.Flags()
	f.StringVar(&solo.traces, "solo-traces", "", "the solo target's trace directory")
	f.StringVar(&solo.layer1, "solo-layer1", "", "the solo target's Layer-1 stream (or its directory)")
	f.StringVar(&solo.phases, "solo-phases", "", "the solo target's phase file")
	f.StringVar(&coloc.traces, "coloc-traces", "", "the co-located target's trace directory")
	f.StringVar(&coloc.layer1, "coloc-layer1", "", "the co-located target's Layer-1 stream (or its directory)")
	f.StringVar(&coloc.phases, "coloc-phases", "", "the co-located target's phase file")
	f.StringVar(&mapping, "mapping", "", "kernel-to-family mapping table (YAML; default the built-in opfamily v1)")
	f.Float64Var(&tol, "share-tolerance", tol, "largest absolute share move of an F3 family, exclusive")
	return cmd
}

func newValidatePrefixCmd() *cobra.Command {
	var layer1 string
	o := contract.DefaultPrefix()
	cmd := verdictCmd("prefix", "Check a prefix-none cell: no common prefix over 16 tokens, clean prefix hit ratio below 1%",
		`prefix checks seed 002's rule for "prefix: none" cells: "The manifest must
have no common prefix longer than 16 tokens, and the clean Layer-1
prefix-query hit ratio must remain below 1%; otherwise the cell is
invalid." No two rows of --manifest (JSONL, prompt_token_ids) may share a
prefix longer than --max-common-prefix tokens. With --layer1 and --phases,
sum(prefix_cache_hits)/sum(prefix_cache_queries) over the Layer-1 records submitted in
the phase file's clean segments must be below --max-hit-ratio.`,
		func() (contract.Result, error) {
			if o.Manifest == "" || o.MaxCommonPrefix < 0 || o.MaxHitRatio <= 0 {
				return contract.Result{}, usage("prefix: --manifest is required; --max-common-prefix not negative, --max-hit-ratio positive")
			}
			if layer1 != "" {
				o.Layer1 = layer1Stream(layer1)
			}
			return contract.PrefixCheck(o), nil
		})
	f := cmd.Flags()
	f.StringVar(&o.Manifest, "manifest", "", "the request manifest (JSONL with prompt_token_ids)")
	f.IntVar(&o.MaxCommonPrefix, "max-common-prefix", o.MaxCommonPrefix, "longest prefix, in tokens, two requests may share")
	f.StringVar(&layer1, "layer1", "", "the run's Layer-1 stream, or a directory holding exactly one *.jsonl")
	f.StringVar(&o.Phases, "phases", "", "the load client's phase file (its clean segments)")
	f.Float64Var(&o.MaxHitRatio, "max-hit-ratio", o.MaxHitRatio, "the clean prefix hit ratio must be below this")
	return cmd
}
