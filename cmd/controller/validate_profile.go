package main

import (
	"github.com/spf13/cobra"

	"warden/pkg/contract"
)

func newValidateProfileWindowsCmd() *cobra.Command {
	var dir string
	var o contract.ProfileWindowOptions
	cmd := verdictCmd("profile-windows", "Check the load client's profile windows: 200 each, each seen to end within its budget",
		`profile-windows checks the profile windows of a load client's result.json
(loadgen's profile_windows, docs/loadgen.md): --windows of them; both calls
answered 200; each window saw the server's window end (its new trace per rank,
or its Layer-1 steps) within its budget. An incomplete window fails with class
profile-artifact (the seed's one exact rerun). A later window whose calls
answered 200 while no trace appeared, the first window's having appeared, fails
as "`+contract.ReusedProfilerMessage+`", without a class: the campaign
stops at once. Named as a validator of a burn-in that opens two short windows,
it stops an unpatched server's campaign before any measured run.`,
		func() (contract.Result, error) {
			if dir == "" {
				return contract.Result{}, usage("profile-windows: --result-dir DIR is required")
			}
			if o.Windows < 0 {
				return contract.Result{}, usage("profile-windows: --windows must not be negative")
			}
			return contract.ProfileWindowsDir(dir, o), nil
		})
	f := cmd.Flags()
	resultDirFlag(f, &dir)
	f.IntVar(&o.Windows, "windows", 0, "profile windows the protocol declares (0: any number)")
	f.BoolVar(&o.RequireObserved, "require-observed", false, "a window that held a fixed time (its end not observed) is an error")
	return cmd
}
