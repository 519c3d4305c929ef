package protocols

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkInputs reports, as problems with file, line and field, the inputs
// the runs will read that are not there: each provenance file (relative
// to the workdir), each file a client's argv names after --manifest (as
// "--manifest PATH" or "--manifest=PATH", relative to the workdir), and
// the executable (argv[0]) of every server, client and validator command:
// a path with a slash, relative to the workdir, must be an executable
// file; a bare name must be found on PATH. An argument still holding a
// launch-time variable (${PORT}, ${ATTEMPT_DIR}, ...) and a {shell: ...}
// command are not checked. With the Slurm executor the commands run on a
// node the plan cannot look at: their executables are not checked and
// the plan says so in InputsUnchecked.
func checkInputs(c *collector, p *Protocol, plan *Plan, protocolFile string) {
	workdir := p.Workdir
	if workdir == "" {
		workdir = "."
	}
	if !filepath.IsAbs(workdir) {
		workdir = filepath.Join(filepath.Dir(protocolFile), workdir)
	}
	at := func(path string) string {
		if filepath.IsAbs(path) {
			return path
		}
		return filepath.Join(workdir, path)
	}
	for i, pf := range p.Provenance {
		if pf.Path == "" || strings.Contains(pf.Path, "${") {
			continue
		}
		if _, err := os.Stat(at(pf.Path)); err != nil {
			c.add(pf.Meta.At("path"), fmt.Sprintf("provenance[%d].path", i), "%s (resolved against the workdir, %s): %s",
				pf.Path, workdir, missingWhy(err))
		}
	}
	onNode := plan.Executor.Kind == "slurm"
	if onNode {
		plan.InputsUnchecked = append(plan.InputsUnchecked,
			"the server, client and validator executables: the Slurm executor runs them on a node the plan cannot look at")
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
		if path == "" || strings.Contains(path, "${") {
			continue
		}
		if _, err := os.Stat(at(path)); err != nil {
			c.add(pos, field, "the manifest %s the client is given (--manifest) %s", path, missingWhy(err))
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
		if _, err := exec.LookPath(name); err != nil {
			c.add(pos, field, "executable %q is not on PATH", name)
		}
		return
	}
	fi, err := os.Stat(at(name))
	switch {
	case err != nil:
		c.add(pos, field, "executable %s %s", name, missingWhy(err))
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		c.add(pos, field, "executable %s is not an executable file (%s)", name, fi.Mode())
	}
}

func missingWhy(err error) string {
	if os.IsNotExist(err) {
		return "does not exist"
	}
	return "cannot be read: " + err.Error()
}
