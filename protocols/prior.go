package protocols

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A co-location check that already ran. Seed 002's A-P3-4: "16.0
// H20-hours cumulative, including E-a co-location validation ... E-a
// consumed 3.964 H20-hours": the check (A-P3-1) ran as E-a, and its
// verdict is an input of the campaign, not a check to run again. A phase
// of kind colocation with prior: plans no runs; its gates' verdicts are
// read from the prior's verdict file at start (and at plan, with its
// inputs), recorded, and the file is hashed into provenance and checked
// again at every resume. Running the check again stays possible: without
// prior: the phase runs, and its runs count in full against the same cap.

// PriorVerdictSchema is the verdict file's schema.
const PriorVerdictSchema = "warden.colocation-verdict/1"

// PriorVerdict is a co-location check's recorded verdict.
type PriorVerdict struct {
	Schema string `json:"schema"`
	// Check names it (E-a).
	Check string `json:"check"`
	// GPUHours is what it consumed, counted in the budget's
	// consumed_gpu_hours (A-P3-4).
	GPUHours float64 `json:"gpu_hours"`
	// Gates are its gates' verdicts: colocation/REGIME, pass or fail.
	Gates []PriorGate `json:"gates"`
	// Evidence are the files its verdict rests on, with their SHA-256:
	// each must be there and hash the same (relative paths: to the
	// verdict file's directory).
	Evidence []PriorEvidence `json:"evidence"`
}

// PriorGate is one gate's recorded verdict.
type PriorGate struct {
	Gate    string             `json:"gate"`
	Verdict string             `json:"verdict"`
	Detail  string             `json:"detail,omitempty"`
	Figures map[string]float64 `json:"figures,omitempty"`
}

// PriorEvidence is a file a prior verdict rests on.
type PriorEvidence struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// maxPriorBytes bounds a verdict file.
const maxPriorBytes = 4 << 20

// ReadPriorVerdict reads and decodes a verdict file (strictly: an unknown
// field is an error), returning it with its SHA-256.
func ReadPriorVerdict(path string) (PriorVerdict, string, error) {
	var pv PriorVerdict
	f, err := os.Open(path)
	if err != nil {
		return pv, "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPriorBytes+1))
	if err != nil {
		return pv, "", err
	}
	if len(data) > maxPriorBytes {
		return pv, "", fmt.Errorf("%s is over %d bytes", path, maxPriorBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pv); err != nil {
		return pv, "", fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	return pv, hex.EncodeToString(sum[:]), nil
}

// Authorized is the regime the verdict authorizes among regimes (in
// fallback order, the gated ones judged by gate "colocation/NAME"): the
// first whose gate passed; "" when none did.
func (pv PriorVerdict) Authorized(regimes []string) string {
	for _, r := range regimes {
		for _, g := range pv.Gates {
			if g.Gate == "colocation/"+r && g.Verdict == "pass" {
				return r
			}
		}
	}
	return ""
}

// CheckPrior checks a verdict against the phase's gates (in fallback
// order), the budget's consumed hours and its evidence files (relative
// to dir). It returns every problem, in words an operator can act on.
func CheckPrior(pv PriorVerdict, gates []string, consumedGPUHours float64, dir string) []string {
	var out []string
	if pv.Schema != PriorVerdictSchema {
		out = append(out, fmt.Sprintf("schema %q, want %q", pv.Schema, PriorVerdictSchema))
	}
	if !(pv.GPUHours > 0) {
		out = append(out, fmt.Sprintf("gpu_hours %v: what the check consumed must be given (A-P3-4 counts it in the cap)", pv.GPUHours))
	} else if pv.GPUHours > consumedGPUHours+1e-9 {
		out = append(out, fmt.Sprintf("the check consumed %g GPU-hours, but budget.consumed_gpu_hours declares %g: A-P3-4 counts it in the cumulative cap, so declare at least %g",
			pv.GPUHours, consumedGPUHours, pv.GPUHours))
	}
	seen := map[string]PriorGate{}
	for i, g := range pv.Gates {
		switch {
		case !slices.Contains(gates, g.Gate):
			out = append(out, fmt.Sprintf("gates[%d]: gate %q is not one of the phase's (%s)", i, g.Gate, strings.Join(gates, ", ")))
		case g.Verdict != "pass" && g.Verdict != "fail":
			out = append(out, fmt.Sprintf("gates[%d]: %s's verdict %q: a prior check's gate passed or failed", i, g.Gate, g.Verdict))
		case seen[g.Gate].Gate != "":
			out = append(out, fmt.Sprintf("gates[%d]: %s is given twice", i, g.Gate))
		}
		seen[g.Gate] = g
	}
	// the fallback order (A-P3-1 item 5): a later regime was checked only
	// after the one before it failed
	for i, name := range gates {
		g, ok := seen[name]
		if !ok || g.Verdict != "pass" {
			continue
		}
		for _, before := range gates[:i] {
			if b, ok := seen[before]; !ok || b.Verdict != "fail" {
				out = append(out, fmt.Sprintf("%s passed, but %s, checked before it, did not fail: the fallback order authorizes a later regime only after the one before it failed", name, before))
			}
		}
		break
	}
	if len(pv.Gates) == 0 {
		out = append(out, "no gate verdict")
	}
	for i, e := range pv.Evidence {
		p := e.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		got, err := fileSHA256(p)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("evidence[%d] %s: %v", i, e.Path, err))
		case got != strings.ToLower(e.SHA256):
			out = append(out, fmt.Sprintf("evidence[%d] %s hashes to sha256 %s, the verdict records %s", i, e.Path, got, e.SHA256))
		}
	}
	return out
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// prior records a colocation phase's prior verdict in the plan: its
// gates read from the file (their names the phase's checks'), the file
// among the provenance inputs, and, when the plan looks at its inputs,
// the verdict read and checked, and its authorized regime the one the
// estimate assumes unless one was asked for.
func (b *builder) prior(ph *Phase, plan *Plan) *PriorInfo {
	pr := ph.Prior
	info := &PriorInfo{File: pr.Verdict}
	field := "prior.verdict"
	for i := range b.p.Phases {
		if &b.p.Phases[i] == ph {
			field = fmt.Sprintf("phases[%d].prior.verdict", i)
		}
	}
	var names []string
	for _, chk := range ph.Colocation.Checks {
		names = append(names, "colocation/"+chk.Regime)
	}
	for i := range b.gates {
		if slices.Contains(names, b.gates[i].Name) {
			b.gates[i].Prior = pr.Verdict
			b.gates[i].Solo, b.gates[i].Target = "", ""
		}
	}
	if !slices.ContainsFunc(plan.Provenance, func(p ProvenanceInfo) bool { return p.Path == pr.Verdict }) {
		plan.Provenance = append(plan.Provenance, ProvenanceInfo{Path: pr.Verdict, Role: "verdict"})
	}
	if !b.opts.CheckInputs {
		plan.InputsUnchecked = append(plan.InputsUnchecked, fmt.Sprintf("phase %s's prior verdict %s: read and checked at start", ph.Name, pr.Verdict))
		return info
	}
	path := pr.Verdict
	if !filepath.IsAbs(path) {
		path = filepath.Join(workdirOf(b.p, b.c.file), path)
	}
	pv, sum, err := ReadPriorVerdict(path)
	if errors.Is(err, fs.ErrNotExist) {
		b.c.addInput(pr.Meta.At("verdict"), field, "%v", err)
		return info
	} else if err != nil {
		b.c.add(pr.Meta.At("verdict"), field, "%v", err)
		return info
	}
	for _, why := range CheckPrior(pv, names, b.p.Budget.ConsumedGPUHours, filepath.Dir(path)) {
		b.c.add(pr.Meta.At("verdict"), field, "%s: %s", pr.Verdict, why)
	}
	var regimes []string
	for _, r := range b.p.Regimes {
		regimes = append(regimes, r.Name)
	}
	info.Read, info.SHA256, info.Check, info.GPUHours, info.Gates = true, sum, pv.Check, pv.GPUHours, pv.Gates
	info.Authorized = pv.Authorized(regimes)
	if b.opts.Regime == "" && info.Authorized != "" {
		b.opts.Regime = info.Authorized
	}
	return info
}

// workdirOf is where a protocol's commands run and its relative paths
// point: its workdir, relative to the protocol file.
func workdirOf(p *Protocol, protocolFile string) string {
	workdir := p.Workdir
	if workdir == "" {
		workdir = "."
	}
	if !filepath.IsAbs(workdir) {
		workdir = filepath.Join(filepath.Dir(protocolFile), workdir)
	}
	return workdir
}
