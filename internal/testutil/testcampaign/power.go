package testcampaign

import "fmt"

// PowerBins are the commands a power-check campaign runs: the stand-in,
// the controller (its validators), loadgen, and loadgen's manifest.
type PowerBins struct{ Standin, Controller, Loadgen, Manifest string }

// Power is a test protocol of the power check on the seed's timeline
// scaled to seconds, on one slot at port: the stand-in server's Layer-1
// steps vary as a saturated short-prompt pattern's do (--layer1-vary),
// 200 a second; loadgen offers 200 requests a second, well under what the
// stand-in serves even on a loaded machine, so that a recovery window's
// completion rate is the offered rate and not the host's spare CPU; it runs a burn-in (a 3 s warm-up, measured by
// validate power) and one saturation run (three 2 s clean segments, two
// 2+8 profile windows, 2 s recoveries) judged by layer2 and recovery
// under rule (literal or calibrated). serverExtra are extra stand-in
// flags (YAML flow items, each after ", "). The manifest is loadgen's
// (materialize --input-uniform 4:16 --output-fixed 4, at least 60,000
// requests).
func Power(b PowerBins, port int, rule, serverExtra string) string {
	vars := fmt.Sprintf("STANDIN: %q, WARDEN: %q, LOADGEN: %q, MANIFEST: %q, RULE: %s", b.Standin, b.Controller, b.Loadgen, b.Manifest, rule)
	client := func(extra string) string {
		return `["${LOADGEN}", run, --manifest, "${MANIFEST}", --base-url, "http://127.0.0.1:${PORT}", --model, standin,
             --load-point, fixed-rate, --request-rate, "200", --max-concurrency, "8", --ignore-eos, --temperature, "0",
             --drain-timeout-seconds, "10", --workload-seed, "20260712", --result-dir, "${ATTEMPT_DIR}/client", ` + extra + `]`
	}
	return Head("power-test", "1.0", vars, []int{port}) + `regimes:
  - {name: solo, concurrency: 1}
classes:
  - {name: c, drain_allowance_s: 10, watchdog_s: 30}
cleanup: {timeout_s: 10}
servers:
  - name: standin
    kind: standin
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.1", --shutdown-timeout, "1", --gpu-mem-mib, "512", --token-ms, "1",
              --effective-config, "enable_chunked_prefill=True", --layer1-dir, "${ATTEMPT_DIR}/opprof", --steps-per-s, "200",
              --layer1-vary, "7", --traces-dir, "${ATTEMPT_DIR}/traces", --profiler-step-s, "0.005"` + serverExtra + `]
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
    expect: [{name: chunked, pattern: 'enable_chunked_prefill=True'}]
loads:
  - name: burnin
    kind: burn-in
    measured: false
    expected_s: 10
    client: ` + client(`--warmup-seconds, "3", --num-clean-segments, "0"`) + `
  - name: saturation
    kind: saturation
    expected_s: 20
    client: ` + client(`--warmup-seconds, "1", --clean-segment-seconds, "2", --num-clean-segments, "3",
             --profile-after-clean, --num-profile-windows, "2", --profile-warmup-iterations, "2", --profile-active-iterations, "8",
             --profile-traces-dir, "${ATTEMPT_DIR}/traces", --profile-ranks, "1", --profile-window-budget-seconds, "5", --recovery-seconds, "2"`) + `
axes:
  - name: pattern
    values: [{id: p1}]
phases:
  - {name: burn-in, kind: burn-in, matrix: {pattern: p1}, loads: [burnin], id: burnin}
  - {name: matrix, kind: primary, matrix: {pattern: [p1]}, loads: [saturation]}
retries: {infrastructure: 1}
validators:
  - name: power
    loads: [burnin]
    command: ["${WARDEN}", validate, power, --result-dir, "${ATTEMPT_DIR}/client", --layer1-dir, "${ATTEMPT_DIR}/opprof",
              --reference-tail-s, "2", --window-s, "0.5", --step-s, "0.02", -o, json]
  - name: layer2
    loads: [saturation]
    command: ["${WARDEN}", validate, layer2, --traces, "${ATTEMPT_DIR}/traces", --layer1, "${ATTEMPT_DIR}/opprof", --phases, "${PHASE_FILE}",
              --windows, "2", --representativeness, "${RULE}", -o, json]
  - name: recovery
    loads: [saturation]
    command: ["${WARDEN}", validate, recovery, --result-dir, "${ATTEMPT_DIR}/client", --layer1-dir, "${ATTEMPT_DIR}/opprof",
              --window-s, "0.5", --step-s, "0.02", --recovery-s, "2", --rule, "${RULE}", -o, json]
power_check:
  min_completion_probability: 0.5
  amendment: "A-TEST (the calibrated rules): protocol-calibrated.yaml"
  gates:
    - {measure: representativeness, judged_by: layer2}
    - {measure: recovery, judged_by: recovery}
`
}
