package attempt_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"warden/pkg/state"
)

// phaseFiles says which phase's table covers the reasons each source file
// of the package can give. A file that names a reason and is missing here
// fails TestEveryReasonHasACase: give it a phase (and its cases).
var phaseFiles = map[string]string{
	"attempt.go":   "preflight", // the spine: a stop before preflight
	"preflight.go": "preflight",
	"start.go":     "start",
	"launch.go":    "start",
	"drain.go":     "drain",
	"gpuprocs.go":  "drain",
	"energy.go":    "drain",
	"stop.go":      "stop",
	"validate.go":  "validate",
	"inputs.go":    "validate",
	"privacy.go":   "validate",
	"exit.go":      "exit",
}

// phaseTables are the phase tests' cases, by phase.
var phaseTables = map[string][]phaseCase{
	"preflight": preflightCases,
	"start":     startCases,
	"drain":     drainCases,
	"stop":      stopCases,
	"validate":  validateCases,
	"exit":      exitCases,
}

// caseReason is the reason a case's path ends with: the last state's, or
// harness-error after a refused record.
func caseReason(path string) state.Reason {
	steps := strings.Fields(path)
	if len(steps) == 0 {
		return ""
	}
	last := steps[len(steps)-1]
	if strings.HasSuffix(last, "!") {
		return state.ReasonHarnessError
	}
	_, r, _ := strings.Cut(last, ":")
	return state.Reason(r)
}

// stateReasons maps the names of pkg/state's reason constants to their
// values, read from its source.
func stateReasons(t *testing.T) map[string]state.Reason {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "state", "transition.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]state.Reason{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != len(vs.Names) {
			return true
		}
		for i, name := range vs.Names {
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || !strings.HasPrefix(name.Name, "Reason") {
				continue
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[name.Name] = state.Reason(v)
		}
		return true
	})
	if len(out) != len(state.Reasons) {
		t.Fatalf("read %d reason constants from pkg/state, it lists %d: %v", len(out), len(state.Reasons), out)
	}
	return out
}

// Every reason a phase's source can give has a case in that phase's
// table that ends with it: a reason added to a phase file without a case
// fails here, naming the file.
func TestEveryReasonHasACase(t *testing.T) {
	t.Parallel()
	reasons := stateReasons(t)
	covered := map[string]map[state.Reason]bool{}
	for phase, cases := range phaseTables {
		covered[phase] = map[state.Reason]bool{}
		for _, c := range cases {
			if r := caseReason(c.path); r != "" {
				if !r.Valid() {
					t.Errorf("%s case %q ends with %q, no reason of pkg/state", phase, c.name, r)
				}
				covered[phase][r] = true
			}
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	given := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var uses []state.Reason
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "state" {
					if r, ok := reasons[sel.Sel.Name]; ok && !slices.Contains(uses, r) {
						uses = append(uses, r)
					}
				}
			}
			return true
		})
		if len(uses) == 0 {
			continue
		}
		phase, ok := phaseFiles[file]
		if !ok {
			t.Errorf("%s gives reasons %v but belongs to no phase: add it to phaseFiles", file, uses)
			continue
		}
		for _, r := range uses {
			given++
			if !covered[phase][r] {
				t.Errorf("%s can give %s: no %s case ends with it", file, r, phase)
			}
		}
	}
	if given == 0 {
		t.Fatal("no reason found in the package's source: the test reads nothing")
	}
}
