package attempt_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/gates"
	"warden/pkg/provenance"
	"warden/pkg/record"
	"warden/pkg/state"
	"warden/pkg/validator"
	"warden/protocols"
)

// validated is the path of an attempt whose validation ended it with
// state:reason.
func validated(end string) string {
	return "reserved preflight starting ready measuring stopping cleanup validating " + end
}

// withValidator gives the run one validator, name v, running line in a
// shell.
func withValidator(h *harness, line string) {
	h.run.Validators = append(h.run.Validators, protocols.ValidatorSpec{Name: "v", Command: shell(line)})
}

// verdict is a validator's command that prints a JSON verdict line.
func verdict(doc string) string { return `echo '` + doc + `'` }

// hangingValidator records its pid in the attempt directory and never
// ends.
func hangingValidator(h *harness, timeoutS float64) {
	h.run.Validators = append(h.run.Validators, protocols.ValidatorSpec{Name: "hang", TimeoutS: timeoutS,
		Command: shell(`echo $$$$ > ${ATTEMPT_DIR}/validator.pid; exec sleep 1000`)})
}

// manifestRun makes the run read a manifest recorded at the campaign's
// start (recorded false: not among the campaign's provenance files), its
// client reporting the SHA-256 reported ("": none) in its result.
func manifestRun(h *harness, recorded bool, reported string) {
	h.t.Helper()
	path := filepath.Join(h.env.Workdir, "inputs", "manifest.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"id": 1}`+"\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if recorded {
		if _, err := provenance.Record(h.dir, []provenance.Entry{{Path: path, Role: "manifest"}}, provenance.Options{}); err != nil {
			h.t.Fatal(err)
		}
	}
	h.run.Manifest = "inputs/manifest.jsonl"
	result := `{"manifest": {}}`
	if reported != "" {
		result = `{"manifest": {"sha256": "` + reported + `"}}`
	}
	h.run.Client = phaseClient([]string{"-result", result}, "drain", "drained", "done")
}

// manifestSum is the SHA-256 of manifestRun's manifest.
func manifestSum() string {
	s := sha256.Sum256([]byte(`{"id": 1}` + "\n"))
	return hex.EncodeToString(s[:])
}

// inTheWay makes rel, in the attempt directory, a directory: a file the
// attempt writes there cannot be.
func inTheWay(h *harness, rel string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Join(h.adir, rel, "in-the-way"), 0o755); err != nil {
		h.t.Fatal(err)
	}
}

// validateCases are validation's outcomes (validate.go, inputs.go,
// privacy.go): the sampler's verdict, the manifest hash, the validators,
// the privacy scans, and the end of a run that measured.
var validateCases = []phaseCase{
	{
		name: "a validator passes",
		prep: func(h *harness) {
			withValidator(h, `test -s "$$`+validator.EnvSignalsFile+`" && `+verdict(`{"verdict": "pass", "figures": {"checked": 3}}`))
		},
		path:  validated("complete"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:pass cleanup:pass gpu-processes:pass drain:pass validator:v:pass privacy:pass privacy-campaign:pass",
		check: func(h *harness) {
			if v := h.gate("validator:v"); v.Figures["checked"] != 3 {
				h.t.Fatalf("validator gate %+v", v)
			}
			var sigs []state.Signal
			b, err := os.ReadFile(filepath.Join(h.adir, "signals.json"))
			if err != nil || json.Unmarshal(b, &sigs) != nil || len(sigs) == 0 || sigs[0].Role != "server" || sigs[0].Signal != "SIGTERM" {
				h.t.Fatalf("signals.json (%v): %s, want the server's SIGTERM", err, b)
			}
		},
	},
	{
		name: "a validator exits non-zero",
		prep: func(h *harness) { withValidator(h, `echo broken >&2; exit 1`) },
		path: validated("failed:validator-failed"),
		check: func(h *harness) {
			h.wantDetail("validator v: exit status 1")
		},
	},
	{
		name: "a validator's verdict fails",
		prep: func(h *harness) {
			withValidator(h, verdict(`{"verdict": "fail", "detail": "12 requests missing"}`))
		},
		path:  validated("failed:validator-failed"),
		check: func(h *harness) { h.wantDetail("validator v: 12 requests missing") },
	},
	{
		// an exact rerun may cure a broken trace window
		name: "a profile artifact missing",
		prep: func(h *harness) {
			withValidator(h, verdict(`{"verdict": "fail", "class": "`+gates.ClassProfileArtifact+`", "detail": "rank 1 trace missing"}`))
		},
		path: validated("failed:profile-artifact"),
	},
	{
		// seed 000: the run is kept, quarantined, excluded from rankings
		name: "quality failed",
		prep: func(h *harness) {
			withValidator(h, verdict(`{"verdict": "fail", "class": "quality", "detail": "outputs failed the quality check"}`))
		},
		path:  validated("quarantined:quality-failed"),
		check: func(h *harness) { h.wantDetail("outputs failed the quality check") },
	},
	{
		name: "drain over its allowance, validated",
		prep: func(h *harness) {
			h.run.DrainS = 1
			h.run.Client = phaseClient(nil, "drain", "+1.1", "drained", "done")
			withValidator(h, verdict(`{"verdict": "pass"}`))
		},
		path: validated("quarantined:drain-quarantine"),
		check: func(h *harness) {
			if v := h.gate("validator:v"); v.Verdict != state.VerdictPass {
				h.t.Fatalf("validator gate %+v", v)
			}
			h.wantDetail("over the 1 s allowance of class c")
		},
	},
	{
		// nothing runs unbounded: a validator that never ends is ended at
		// its timeout_s, and the attempt is the harness's
		name: "a validator past its bound",
		prep: func(h *harness) { hangingValidator(h, 0.3) },
		path: validated("failed:harness-error"),
		check: func(h *harness) {
			h.wantDetail("validator hang ran past its 0.3 s bound (timeout_s); ended")
			if figureOf(h, "validator_timeout_s") != 0.3 {
				h.t.Fatalf("validator_timeout_s %v", figureOf(h, "validator_timeout_s"))
			}
			h.wantValidatorGone()
		},
	},
	{
		name: "stopped while a validator runs",
		prep: func(h *harness) {
			hangingValidator(h, 1000)
			h.stopAt(state.Validating, nil)
		},
		path: validated("interrupted:interrupted"),
		check: func(h *harness) {
			h.wantDetail("stopped while validator hang ran; ended")
			h.chargedOnce()
		},
	},
	{
		// a validator runs under its memory_mib as RLIMIT_AS from its
		// first instruction: the shell validator sees the limit
		name: "a validator's memory bound",
		prep: func(h *harness) {
			h.run.Validators = []protocols.ValidatorSpec{{Name: "mem", MemoryMiB: 64, Command: shell(`test "$$(ulimit -v)" = 65536`)}}
		},
		path: validated("complete"),
	},
	{
		name: "a validator's memory bound too small",
		prep: func(h *harness) {
			h.run.Validators = []protocols.ValidatorSpec{{Name: "mem", MemoryMiB: 1e-4, Command: shell(`exit 0`)}}
		},
		path:  validated("failed:harness-error"),
		check: func(h *harness) { h.wantDetail("validator memory bound of 0.0001 MiB is too small") },
	},
	{
		name:  "a validator's command does not expand",
		prep:  func(h *harness) { withValidator(h, `check ${NO_SUCH_VARIABLE}`) },
		path:  validated("failed:harness-error"),
		check: func(h *harness) { h.wantDetail("NO_SUCH_VARIABLE") },
	},
	{
		name: "a validator cannot be started",
		prep: func(h *harness) {
			withValidator(h, `exit 0`)
			inTheWay(h, "validator-v.out")
		},
		path:  validated("failed:validator-failed"),
		check: func(h *harness) { h.wantDetail("validator v: ") },
	},
	{
		name: "signals.json cannot be written",
		prep: func(h *harness) {
			withValidator(h, `exit 0`)
			inTheWay(h, "signals.json")
		},
		path:  validated("failed:harness-error"),
		check: func(h *harness) { h.wantDetail("write signals.json") },
	},
	{
		name: "the record of validating refused",
		prep: func(h *harness) {
			h.openEnds()
			withValidator(h, `exit 0`)
			h.refuseAt(state.Validating)
		},
		path:  "reserved preflight starting ready measuring stopping cleanup validating!",
		check: func(h *harness) { h.wantEnded() },
	},
	{
		// the files the attempt writes once its client ended, each
		// replaced by the client with a link out of the campaign: each
		// write replaces the link or refuses it, none follows it
		name: "links the client planted in the attempt directory",
		prep: func(h *harness) {
			out := h.t.TempDir()
			line := phaseClientBin + " drain drained done"
			for _, f := range []string{"gates.jsonl", "signals.json", "postmeasure.json", "commands.log", "server-config.json"} {
				line += ` && ln -sf ` + out + `/` + f + ` "$$WARDEN_ATTEMPT_DIR/` + f + `"`
			}
			h.run.Client = shell(line)
			withValidator(h, `exit 0`)
			h.t.Cleanup(func() { wantEmpty(h.t, out) })
		},
		path: validated("complete"),
	},
	{
		// seed 002 stop condition 1: the client read the manifest
		// recorded at start
		name: "the manifest the client read is the recorded one",
		prep: func(h *harness) { manifestRun(h, true, manifestSum()) },
		path: happy,
	},
	{
		name: "the client read another manifest",
		prep: func(h *harness) { manifestRun(h, true, strings.Repeat("0", 64)) },
		path: validated("failed:input-changed"),
		check: func(h *harness) {
			h.wantDetail("recorded sha256 "+manifestSum(), "the client read "+strings.Repeat("0", 64))
		},
	},
	{
		// fail closed: a hash that cannot be compared is a change
		name:  "the client reports no manifest hash",
		prep:  func(h *harness) { manifestRun(h, true, "") },
		path:  validated("failed:input-changed"),
		check: func(h *harness) { h.wantDetail("cannot be checked", "reports no manifest.sha256") },
	},
	{
		name: "no hash recorded for the manifest",
		prep: func(h *harness) {
			if _, err := provenance.Record(h.dir, nil, provenance.Options{}); err != nil {
				h.t.Fatal(err)
			}
			manifestRun(h, false, manifestSum())
		},
		path:  validated("failed:input-changed"),
		check: func(h *harness) { h.wantDetail("no hash recorded at start") },
	},
	{
		name: "a forbidden field in the attempt's files",
		prep: func(h *harness) {
			h.run.Client = phaseClient([]string{"-write", `client/requests.jsonl={"request": 1, "prompt": "tell me a secret"}` + "\n"}, "drain", "drained", "done")
		},
		path:  validated("failed:privacy-violation"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:pass cleanup:pass gpu-processes:pass drain:pass privacy:fail",
		check: func(h *harness) {
			v := h.gate("privacy")
			if !strings.Contains(v.Detail, "client/requests.jsonl") || !strings.Contains(v.Detail, "prompt") || strings.Contains(v.Detail, "tell me a secret") {
				h.t.Fatalf("privacy gate %+v", v)
			}
		},
	},
	{
		name: "a forbidden field in the campaign's own files",
		prep: func(h *harness) {
			if err := os.WriteFile(filepath.Join(h.dir, "notes.jsonl"), []byte(`{"prompt": "tell me a secret"}`+"\n"), 0o644); err != nil {
				h.t.Fatal(err)
			}
		},
		path:  validated("failed:privacy-violation"),
		gates: "preflight:pass cpu-local:pass port:pass listener:pass effective-config:pass cleanup:pass gpu-processes:pass drain:pass privacy:pass privacy-campaign:fail",
		check: func(h *harness) { h.wantDetail("privacy scan of the campaign's own files: ", "notes.jsonl") },
	},
	{
		name: "a private input's text in the client's output",
		prep: func(h *harness) {
			text := strings.Repeat("the private prompt of a recorded manifest ", 3)
			testcampaign.RecordPrivateManifest(h.t, h.dir, filepath.Join(h.t.TempDir(), "private", "manifest.jsonl"), text)
			var err error
			if h.env.Private, err = gates.CampaignPrivateIndex(h.dir, 0); err != nil {
				h.t.Fatal(err)
			}
			h.run.Client = phaseClient([]string{"-write", "client/echo.txt=" + text}, "drain", "drained", "done")
		},
		path:  validated("failed:privacy-violation"),
		check: func(h *harness) { h.wantDetail("client/echo.txt") },
	},
	{
		// another user's process seen by the sampler after the client
		// ended, before the shutdown
		name: "foreign GPU process seen after the client ended",
		prep: func(h *harness) {
			h.at(state.Stopping, func(record.Report) {
				h.claim(0, 4242, 1024)
				n := h.faults.sampled()
				// a sample read after the claim, judged once the next is read
				waitUntil(h.t, "a sample of the foreign process judged", func() bool { return h.faults.sampled() >= n+3 })
			})
			h.at(state.Cleanup, func(record.Report) { h.claim(0, 4242, 0) })
		},
		path: validated("failed:foreign-gpu-process"),
		check: func(h *harness) {
			if v := h.gate("gpu-processes"); v.Verdict != state.VerdictFail {
				h.t.Fatalf("gpu-processes gate %+v", v)
			}
		},
	},
	{
		// fail closed: nothing watched the GPUs' processes
		name:  "the GPU sampler did not start",
		prep:  func(h *harness) { inTheWay(h, "gpu-samples.jsonl") },
		path:  validated("failed:harness-error"),
		check: func(h *harness) { h.wantDetail("gpu-processes: the GPU sampler did not start") },
	},
	{
		name: "no GPU sample could be read",
		prep: func(h *harness) {
			h.faults.set(func(g *gpuFaults) { g.sampleErr = errors.New("NVML: GPU is lost") })
		},
		path:  validated("failed:harness-error"),
		check: func(h *harness) { h.wantDetail("gpu-processes: no sample of the GPUs' processes could be read") },
	},
}

func TestValidate(t *testing.T) {
	t.Parallel()
	runCases(t, validateCases)
}

// wantValidatorGone fails the test unless the hanging validator started,
// recorded its pid and is gone.
func (h *harness) wantValidatorGone() {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.adir, "validator.pid"))
	if err != nil {
		h.t.Fatalf("the validator did not start: %v", err)
	}
	pid := 0
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(b))), &pid); err != nil || pid <= 0 {
		h.t.Fatalf("validator.pid %q", b)
	}
	if st := procState(pid); st != 0 {
		h.t.Fatalf("validator pid %d still exists (state %c)", pid, st)
	}
}
