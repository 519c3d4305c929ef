package validator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/safefile"
	"warden/protocols"
)

// gateTimeout bounds a co-location gate's validator.
const gateTimeout = 10 * time.Minute

// GateDirs are the directories a co-location gate's validator is run
// with: the solo run's and the target's results (NEED_SOLO_DIR,
// NEED_TARGET_DIR), and the campaign's, its workdir and the protocol's.
type GateDirs struct {
	Solo, Target, Campaign, Workdir, ProtocolDir string
}

// RunGate runs the co-location gate g's validator through l, bounded by
// gateTimeout (then ended, Grace for its leader and its group), its
// output beside the target's result, and reads its verdict; now stamps
// the verdict.
func RunGate(l *launch.Launcher, g protocols.GateInfo, d GateDirs, now func() time.Time) gates.Verdict {
	vars := map[string]string{
		"NEED_SOLO_DIR": d.Solo, "NEED_TARGET_DIR": d.Target, "CAMPAIGN_DIR": d.Campaign,
		"WORKDIR": d.Workdir, "PROTOCOL_DIR": d.ProtocolDir,
	}
	argv, err := g.Validator.Expand(vars)
	if err != nil {
		return gates.Verdict{Gate: g.Name, Verdict: gates.Error, Detail: err.Error(), At: now()}
	}
	out := filepath.Join(d.Target, "gate-"+strings.ReplaceAll(g.Name, "/", "-")+".out")
	p, err := l.Start(launch.Spec{
		Role: "gate-validator", Argv: argv, Env: append(os.Environ(), "NEED_SOLO_DIR="+d.Solo, "NEED_TARGET_DIR="+d.Target),
		Dir: d.Workdir, StdoutPath: out, StderrPath: out + ".err",
		Stop: launch.StopOptions{Grace: Grace, GroupGrace: Grace},
	})
	if err != nil {
		return gates.Verdict{Gate: g.Name, Verdict: gates.Error, Detail: fmt.Sprintf("start validator: %v", err), At: now()}
	}
	select {
	case <-p.Done():
	case <-time.After(gateTimeout):
		ctx, cancel := context.WithTimeout(context.Background(), 2*Grace+stopSlack)
		p.Shutdown(ctx)
		cancel()
		<-p.Done()
	}
	ex := p.Exit()
	stdout, _ := safefile.ReadFile(out, safefile.ChildLimit)
	return gates.ValidatorResult(g.Name, ex.Code, ex.Signal, stdout, now())
}
