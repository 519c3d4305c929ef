package protocols

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// checkInputs reports, as problems with file, line and field, the inputs
// the runs will read that are not there: each provenance file (relative
// to the workdir); each file a client's argv names after --manifest (as
// "--manifest PATH" or "--manifest=PATH", relative to the workdir); and
// the executable (argv[0]) of every server, client, validator, co-location
// gate validator and ledger command: a path with a slash, relative to the
// workdir, must be an executable file, a bare name must be found on PATH.
// Each missing file is reported once: a provenance file that is also a
// manifest or an executable, as the provenance file. An argument still
// holding a launch-time variable (${PORT}, ${ATTEMPT_DIR}, ...) and a
// {shell: ...} command are not checked. With the Slurm executor the
// commands run on a node the plan cannot look at: their executables (all
// but the ledger's, which runs at start) are not checked and the plan
// says so in InputsUnchecked.
//
// A missing provenance file close to a load's manifest that is not among
// them is reported with it (builder.explainMiss): the cause, before (and
// instead of) its symptom. With all false only the provenance files are
// looked for (the plan has other problems).
func checkInputs(c *collector, b *builder, p *Protocol, plan *Plan, protocolFile string, all bool) {
	workdir := p.Workdir
	if workdir == "" {
		workdir = "."
	}
	if !filepath.IsAbs(workdir) {
		workdir = filepath.Join(filepath.Dir(protocolFile), workdir)
	}
	// a missing provenance file is reported once, as such, and not again
	// as a manifest or an executable
	reported := map[string]bool{}
	at := func(path string) string {
		if !filepath.IsAbs(path) {
			path = filepath.Join(workdir, path)
		}
		if reported[filepath.Clean(path)] {
			return ""
		}
		return path
	}
	for i, pf := range p.Provenance {
		if pf.Path == "" || strings.Contains(pf.Path, "${") {
			continue
		}
		path := at(pf.Path)
		if _, err := os.Stat(path); err != nil {
			where := ""
			if !filepath.IsAbs(pf.Path) {
				where = " (relative to the workdir, " + workdir + ")"
			}
			c.addInput(pf.Meta.At("path"), fmt.Sprintf("provenance[%d].path", i), "%s%s %s%s", pf.Path, where, missingWhy(err), b.explainMiss(pf.Path))
			reported[filepath.Clean(path)] = true
			continue
		}
		if isSHA256(pf.SHA256) {
			checkFrozenHash(c, pf, fmt.Sprintf("provenance[%d].sha256", i), path)
		}
		if pf.Shards != "" {
			if ms, err := filepath.Glob(filepath.Join(path, pf.Shards)); err == nil && len(ms) == 0 {
				c.add(pf.Meta.At("shards"), fmt.Sprintf("provenance[%d].shards", i), "no file of %s matches %q", pf.Path, pf.Shards)
			}
		}
	}
	if !all {
		return
	}
	// the ledger runs at start, where the controller runs
	for i, cmd := range p.Ledger {
		if i < len(plan.Ledger) {
			checkExecutable(c, cmd.Pos, fmt.Sprintf("ledger[%d]", i), plan.Ledger[i], at)
		}
	}
	onNode := plan.Executor.Kind == "slurm"
	if onNode {
		plan.InputsUnchecked = append(plan.InputsUnchecked,
			"the server, client and validator executables: the Slurm executor runs them on a node the plan cannot look at")
	} else {
		checkGateValidators(c, p, plan, at)
	}
	servers, loads, validators := map[string]*Server{}, map[string]*Load{}, map[string]*Validator{}
	for i := range p.Servers {
		servers[p.Servers[i].Name] = &p.Servers[i]
	}
	for i := range p.Loads {
		loads[p.Loads[i].Name] = &p.Loads[i]
	}
	for i := range p.Validators {
		validators[p.Validators[i].Name] = &p.Validators[i]
	}
	for _, r := range plan.Runs {
		if l := loads[r.Load]; l != nil {
			field := "loads." + l.Name + ".client"
			checkManifestArgs(c, l.Client.Pos, field, r.Client.Argv, at)
			if !onNode {
				checkExecutable(c, l.Client.Pos, field, r.Client, at)
			}
		}
		if onNode {
			continue
		}
		if s := servers[r.Server.Name]; s != nil {
			checkExecutable(c, s.Command.Pos, "servers."+s.Name+".command", r.Server.Command, at)
		}
		for _, vs := range r.Validators {
			if v := validators[vs.Name]; v != nil {
				checkExecutable(c, v.Command.Pos, "validators."+v.Name+".command", vs.Command, at)
			}
		}
	}
}

// checkGateValidators checks the co-location gates' validators: the plan
// lists each phase's gates, one per check, in phase order.
func checkGateValidators(c *collector, p *Protocol, plan *Plan, at func(string) string) {
	var gates []GateInfo
	for _, g := range plan.Gates {
		if g.Kind == "colocation" {
			gates = append(gates, g)
		}
	}
	for _, ph := range p.Phases {
		co := ph.Colocation
		if co == nil {
			continue
		}
		n := min(len(co.Checks), len(gates))
		for _, g := range gates[:n] {
			if co.Gate.Validator != nil && g.Validator != nil {
				checkExecutable(c, co.Gate.Validator.Pos, "phases."+ph.Name+".colocation.gate.validator", *g.Validator, at)
			}
		}
		gates = gates[n:]
	}
}

// checkManifestArgs checks the files argv names after --manifest.
func checkManifestArgs(c *collector, pos Pos, field string, argv []string, at func(string) string) {
	for i, a := range argv {
		path := ""
		switch {
		case a == "--manifest" && i+1 < len(argv):
			path = argv[i+1]
		case strings.HasPrefix(a, "--manifest="):
			path = strings.TrimPrefix(a, "--manifest=")
		}
		if path == "" || strings.Contains(path, "${") || at(path) == "" {
			continue
		}
		if _, err := os.Stat(at(path)); err != nil {
			c.addInput(pos, field, "the manifest %s the client is given (--manifest) %s", path, missingWhy(err))
		}
	}
}

// checkExecutable checks a command's argv[0].
func checkExecutable(c *collector, pos Pos, field string, cmd CommandSpec, at func(string) string) {
	if len(cmd.Argv) == 0 || strings.Contains(cmd.Argv[0], "${") {
		return
	}
	name := cmd.Argv[0]
	if !strings.Contains(name, "/") {
		if !onPath(name) {
			c.addInput(pos, field, "executable %q is not on PATH", name)
		}
		return
	}
	if at(name) == "" {
		return // a provenance file, reported missing as such
	}
	fi, err := os.Stat(at(name))
	switch {
	case err != nil:
		c.addInput(pos, field, "executable %s %s", name, missingWhy(err))
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		c.addInput(pos, field, "executable %s is not an executable file (%s)", name, fi.Mode())
	}
}

func missingWhy(err error) string {
	if os.IsNotExist(err) {
		return "does not exist"
	}
	return "cannot be read: " + err.Error()
}

// onPath says whether name is an executable regular file in a directory
// of $PATH, as a shell would find it. (Searched here rather than with
// os/exec, which the protocol package, pure, does not import.)
func onPath(name string) bool {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return true
		}
	}
	return false
}

// checkFrozenHash hashes a provenance file whose hash the protocol
// freezes and reports, at the sha256 field, a file with another hash or
// one that cannot be read. Reading streams the file: memory stays bounded.
func checkFrozenHash(c *collector, pf ProvenanceFile, field, path string) {
	fh, err := os.Open(path)
	if err != nil {
		c.add(pf.Meta.At("sha256"), field, "%s cannot be hashed: %v", pf.Path, err)
		return
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() {
		c.add(pf.Meta.At("sha256"), field, "%s is not a regular file: it cannot have the frozen hash", pf.Path)
		return
	}
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		c.add(pf.Meta.At("sha256"), field, "%s cannot be hashed: %v", pf.Path, err)
		return
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != pf.SHA256 {
		c.add(pf.Meta.At("sha256"), field, "%s has sha256 %s; the protocol freezes %s", pf.Path, got, pf.SHA256)
	}
}
