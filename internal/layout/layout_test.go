// Package layout holds a test that keeps the import directions of the
// design true: which package may use which.
package layout

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	// -e: a package that does not compile (a move in progress) is still
	// listed, with its imports as far as they could be read.
	cmd := exec.Command("go", "list", "-e", "-json", "warden/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	pkgs := map[string]pkg{}
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Logf("package %s has errors; its rules see the imports go list could read: %s", p.ImportPath, p.Error.Err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func TestImportDirections(t *testing.T) {
	pkgs := listPackages(t)
	type rule struct {
		pkg       string
		direct    bool // check direct imports only
		tree      bool // the rule holds for pkg and every package under it
		forbidden []string
		except    []string // allowed although a forbidden entry matches
		why       string
	}
	rules := []rule{
		{pkg: "warden/protocols", forbidden: []string{"warden/pkg/"}, why: "the protocol package is pure and imports nothing under pkg/"},
		{pkg: "warden/pkg/state", forbidden: []string{"warden/pkg/launch", "github.com/NVIDIA/go-nvml", "os/exec"}, why: "the store starts no process and calls no NVML"},
		{pkg: "warden/pkg/launch", forbidden: []string{"warden/pkg/state", "go.etcd.io/bbolt"}, why: "process handling does not touch the database"},
		{pkg: "warden/pkg/gates", forbidden: []string{"warden/pkg/launch", "warden/pkg/state", "os/exec"}, why: "gates neither start nor kill processes nor write state"},
		{pkg: "warden/pkg/budget", direct: true, forbidden: []string{"os", "net", "io", "warden/pkg/"}, why: "budget accounting is pure"},
		{pkg: "warden/pkg/loadgen", forbidden: []string{"warden/cmd/", "github.com/spf13/cobra", "warden/pkg/state", "warden/pkg/launch"}, why: "the load client library holds no CLI and no controller internals"},
		{pkg: "warden/cmd/ctlq", forbidden: []string{"warden/pkg/launch", "github.com/NVIDIA/go-nvml", "warden/cmd/controller"}, why: "the query tool talks to the controller only through the API"},
		{pkg: "warden/cmd/ctlq", forbidden: []string{"warden/pkg/runner"}, why: "the query tool reads the controller through the API; it never runs attempts"},
		{pkg: "warden/cmd/ctlq", direct: true, forbidden: []string{"os/exec"}, why: "the query tool starts no process (its live view's terminal library imports os/exec, so the rule is on its own imports)"},
		{pkg: "warden/pkg/runner", forbidden: []string{"warden/cmd/", "github.com/spf13/cobra", "github.com/spf13/pflag"}, why: "the runner is a library that mains wire: it knows no command and no CLI library"},
		{pkg: "warden/pkg/contract", forbidden: []string{"warden/pkg/launch", "warden/pkg/state", "warden/pkg/runner", "go.etcd.io/bbolt", "os/exec"}, why: "validators read artifacts: they start no process and touch no database"},
		{pkg: "warden/pkg/slurm", forbidden: []string{"os/exec", "warden/pkg/launch", "warden/pkg/state", "warden/pkg/runner"}, why: "the Slurm package builds command lines and reads Slurm's answers; the caller's launcher and reaper run the commands"},
		{pkg: "warden/pkg/dirlayout", direct: true, forbidden: []string{"warden/", "os/exec"}, except: []string{"warden/pkg/state", "warden/protocols", "warden/pkg/atomicfile", "warden/pkg/safefile"},
			why: "the campaign directory's layout is a leaf: every part that reads the directory imports it, so it imports only the store, the protocol package and the file helpers"},
		{pkg: "warden/pkg/report", forbidden: []string{"warden/pkg/runner", "warden/pkg/launch", "os/exec", "warden/cmd/", "github.com/spf13/cobra"},
			why: "the report reads the query API and the campaign's files: it runs nothing and knows no command"},
		{pkg: "warden/pkg/views", forbidden: []string{"warden/pkg/runner", "warden/pkg/launch", "os/exec", "warden/cmd/", "github.com/spf13/cobra"},
			why: "the text views print what the query API answers: they run nothing and know no command"},
		{pkg: "warden/pkg/views/watch", forbidden: []string{"warden/pkg/runner", "warden/pkg/launch", "warden/cmd/", "github.com/spf13/cobra"},
			why: "the live view polls the query API: it runs nothing and knows no command"},
		{pkg: "warden/pkg/views/watch", direct: true, forbidden: []string{"os/exec"},
			why: "the live view starts no process (its terminal library, Lip Gloss, imports os/exec, so the rule is on its own imports)"},
		{pkg: "warden/pkg/gpu", tree: true, forbidden: []string{"warden/pkg/gates"}, why: "GPU backends report what they read; the gates judge it, not the other way round"},
		{pkg: "warden/pkg/gpu", tree: true, forbidden: []string{"warden/protocols"}, why: "GPU backends read devices; they know nothing of protocols (the CPU-list format is internal/cpulist's)"},
		{pkg: "warden/internal/cpulist", direct: true, forbidden: []string{"warden/"}, why: "the CPU-list format is a leaf that the protocol package and the GPU backends share"},
		{pkg: "warden/internal/testutil/testcampaign", direct: true, forbidden: []string{"warden/cmd/", "warden/internal/", "os/exec"}, why: "the tests' campaign fixtures are written with the product's writers; they run nothing and know no command"},
		{pkg: "warden/internal/testutil/testbin", direct: true, forbidden: []string{"warden/"}, why: "building the tests' binaries is a leaf: it runs the go command and knows no package of the product"},
		{pkg: "warden/internal/testutil/testgroup", direct: true, forbidden: []string{"warden/"}, why: "the tests' process-group starter is a leaf: it runs a command and knows no package of the product"},
		{pkg: "warden/internal/testutil/testterm", direct: true, forbidden: []string{"warden/"}, why: "the tests' pseudo-terminal is a leaf: it runs a command and knows no package of the product"},
		{pkg: "warden/internal/cli", direct: true, forbidden: []string{"warden/"}, why: "what the mains share is a leaf: it runs a root command and knows no package of the product"},
		{pkg: "warden/internal/mountinfo", direct: true, forbidden: []string{"warden/"}, why: "the kernel's mount table is a leaf that the cgroup manager, ctlq's storage hint and the stand-in share"},
		// The parts of a run's life, from the bottom up: the scheduling
		// policy and the outcome policy decide; an attempt's record and the
		// validators' bounds serve the attempt lifecycle; the node side and
		// the Slurm executor use the lifecycle; the campaign loop drives
		// them all. Nothing below imports upward.
		{pkg: "warden/pkg/schedule", direct: true, forbidden: []string{"os", "net", "io", "os/exec", "syscall", "go.etcd.io/bbolt", "warden/pkg/launch"}, why: "the scheduling policy is pure: it decides from a View and does no I/O"},
		{pkg: "warden/pkg/schedule", forbidden: []string{"os/exec", "warden/pkg/launch", "github.com/NVIDIA/go-nvml", "warden/pkg/record", "warden/pkg/attempt", "warden/pkg/runner"}, why: "the scheduling policy starts nothing and knows no attempt or campaign loop"},
		{pkg: "warden/pkg/outcome", forbidden: []string{"os/exec", "warden/pkg/launch", "warden/pkg/schedule", "warden/pkg/attempt", "warden/pkg/runner"}, why: "the outcome policy reads records and decides; it starts nothing"},
		{pkg: "warden/pkg/record", forbidden: []string{"warden/pkg/validator", "warden/pkg/attempt", "warden/pkg/node", "warden/pkg/slurmexec", "warden/pkg/runner", "warden/pkg/schedule"}, why: "an attempt's record is below everything that writes one"},
		{pkg: "warden/pkg/validator", forbidden: []string{"warden/pkg/attempt", "warden/pkg/node", "warden/pkg/slurmexec", "warden/pkg/runner", "warden/pkg/schedule"}, why: "the validators' bounds and re-run are below the attempt lifecycle, so an amendment re-runs validators without it"},
		{pkg: "warden/pkg/attempt", forbidden: []string{"warden/pkg/runner", "warden/pkg/slurmexec", "warden/pkg/node", "warden/pkg/schedule", "warden/pkg/gpu/fakegpu", "warden/pkg/gpu/nvmlgpu", "warden/cmd/"}, why: "an attempt runs from its environment alone: it never reaches back to the campaign loop, nor to a GPU backend"},
		{pkg: "warden/pkg/node", forbidden: []string{"warden/pkg/runner", "warden/pkg/slurmexec", "warden/pkg/schedule", "warden/cmd/"}, why: "the node side runs one attempt with the lifecycle; it drives no campaign"},
		{pkg: "warden/pkg/slurmexec", forbidden: []string{"warden/pkg/runner", "warden/pkg/schedule", "warden/pkg/gpu/fakegpu", "warden/pkg/gpu/nvmlgpu", "warden/cmd/"}, why: "the Slurm executor runs attempts for the campaign loop, which it does not know"},
		{pkg: "warden/pkg/runner", forbidden: []string{"warden/pkg/gpu/fakegpu", "warden/pkg/gpu/nvmlgpu"}, why: "the campaign loop reads GPUs through the interface its caller opened"},
		{pkg: "warden/pkg/sweep", direct: true, forbidden: []string{"os/exec", "warden/pkg/launch", "warden/pkg/state", "warden/pkg/runner", "warden/cmd/", "github.com/spf13/cobra", "github.com/spf13/pflag"},
			why: "the sweep writes a protocol and its manifest: it starts nothing, touches no campaign's records and knows no command line library"},
		{pkg: "warden/pkg/amend", forbidden: []string{"warden/pkg/runner", "warden/pkg/attempt"}, why: "an amendment re-runs validators (pkg/validator) without the campaign loop or the attempt lifecycle"},
	}
	for _, r := range rules {
		p, ok := pkgs[r.pkg]
		if !ok {
			t.Errorf("package %s not found", r.pkg)
			continue
		}
		subjects := []pkg{p}
		if r.tree {
			for path, sub := range pkgs {
				if strings.HasPrefix(path, r.pkg+"/") {
					subjects = append(subjects, sub)
				}
			}
		}
		for _, p := range subjects {
			deps := p.Deps
			if r.direct {
				deps = p.Imports
			}
			for _, d := range deps {
				for _, f := range r.forbidden {
					if matches(d, f) && !allowed(d, r.except) {
						t.Errorf("%s depends on %s: %s", p.ImportPath, d, r.why)
					}
				}
			}
		}
	}
}

// allowed reports whether the import path d is one of except (or under one).
func allowed(d string, except []string) bool {
	for _, e := range except {
		if d == e || strings.HasPrefix(d, e+"/") {
			return true
		}
	}
	return false
}

// matches reports whether the import path d is forbidden by f: f itself, a
// package under f, or, when f ends in "/", any path starting with f.
func matches(d, f string) bool {
	return d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) || strings.HasPrefix(d, f+"/")
}

// The packages one attempt's life is split into stay small enough to
// read: at most 2,000 lines of non-test Go each, comments included.
func TestRunPackagesSize(t *testing.T) {
	pkgs := listPackages(t)
	for _, name := range []string{"attempt", "record", "runner", "node", "slurmexec", "schedule", "outcome", "validator"} {
		p, ok := pkgs["warden/pkg/"+name]
		if !ok {
			t.Errorf("warden/pkg/%s is not listed", name)
			continue
		}
		lines := 0
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(b, []byte("\n"))
		}
		if lines > 2000 {
			t.Errorf("%s has %d lines of non-test Go, more than 2,000: split it by role", p.ImportPath, lines)
		}
	}
}
