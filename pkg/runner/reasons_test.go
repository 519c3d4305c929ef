package runner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/state"
)

// Every reason is produced by the runner: a reason nothing produces is
// either produced or deleted (the policy file itself does not count).
func TestEveryReasonProduced(t *testing.T) {
	names := map[string]state.Reason{
		"ReasonServerExit": state.ReasonServerExit, "ReasonServerNotReady": state.ReasonServerNotReady,
		"ReasonClientFailed": state.ReasonClientFailed, "ReasonOOM": state.ReasonOOM,
		"ReasonGPUNotIdle": state.ReasonGPUNotIdle, "ReasonForeignGPUProcess": state.ReasonForeignGPUProcess,
		"ReasonCleanupTimeout": state.ReasonCleanupTimeout, "ReasonCleanupFailed": state.ReasonCleanupFailed,
		"ReasonDrainWatchdog": state.ReasonDrainWatchdog, "ReasonDrainQuarantine": state.ReasonDrainQuarantine,
		"ReasonConfigMismatch": state.ReasonConfigMismatch, "ReasonValidatorFailed": state.ReasonValidatorFailed,
		"ReasonPrivacyViolation": state.ReasonPrivacyViolation, "ReasonInterrupted": state.ReasonInterrupted,
		"ReasonHarnessError": state.ReasonHarnessError, "ReasonProfileArtifact": state.ReasonProfileArtifact,
		"ReasonBudgetExhausted": state.ReasonBudgetExhausted, "ReasonMeasureDeadline": state.ReasonMeasureDeadline,
		"ReasonDrainUnseen": state.ReasonDrainUnseen, "ReasonQualityFailed": state.ReasonQualityFailed,
		"ReasonStepLost": state.ReasonStepLost, "ReasonDrainAbandoned": state.ReasonDrainAbandoned,
		"ReasonInputChanged": state.ReasonInputChanged, "ReasonClockLoad": state.ReasonClockLoad,
	}
	if len(names) != len(state.Reasons) {
		t.Fatalf("the test names %d reasons, state has %d: add the new one here", len(names), len(state.Reasons))
	}
	used := map[string]bool{}
	// the campaign loop and the attempt lifecycle produce them, the
	// reasons of a validator's classes through outcome.ValidatorReason
	files, _ := filepath.Glob("*.go")
	lifecycle, _ := filepath.Glob("../attempt/*.go")
	files = append(append(files, lifecycle...), "../outcome/validator.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "policy.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "state" {
					used[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	for name := range names {
		if !used[name] {
			t.Errorf("state.%s is produced nowhere in the runner", name)
		}
	}
}
