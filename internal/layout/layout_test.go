// Package layout holds a test that keeps the import directions of the
// design true: which package may use which.
package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "warden/...")
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
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func TestImportDirections(t *testing.T) {
	pkgs := listPackages(t)
	rules := []struct {
		pkg       string
		direct    bool // check direct imports only
		forbidden []string
		why       string
	}{
		{"warden/protocols", false, []string{"warden/pkg/"}, "the protocol package is pure and imports nothing under pkg/"},
		{"warden/pkg/state", false, []string{"warden/pkg/launch", "github.com/NVIDIA/go-nvml", "os/exec"}, "the store starts no process and calls no NVML"},
		{"warden/pkg/launch", false, []string{"warden/pkg/state", "go.etcd.io/bbolt"}, "process handling does not touch the database"},
		{"warden/pkg/gates", false, []string{"warden/pkg/launch", "warden/pkg/state", "os/exec"}, "gates neither start nor kill processes nor write state"},
		{"warden/pkg/budget", true, []string{"os", "net", "io", "warden/pkg/"}, "budget accounting is pure"},
		{"warden/pkg/loadgen", false, []string{"warden/cmd/", "github.com/spf13/cobra", "warden/pkg/state", "warden/pkg/launch"}, "the load client library holds no CLI and no controller internals"},
		{"warden/cmd/ctlq", false, []string{"warden/pkg/launch", "github.com/NVIDIA/go-nvml", "warden/cmd/controller"}, "the query tool talks to the controller only through the API"},
	}
	for _, r := range rules {
		p, ok := pkgs[r.pkg]
		if !ok {
			t.Errorf("package %s not found", r.pkg)
			continue
		}
		deps := p.Deps
		if r.direct {
			deps = p.Imports
		}
		for _, d := range deps {
			for _, f := range r.forbidden {
				if d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s depends on %s: %s", r.pkg, d, r.why)
				}
			}
		}
	}
}
