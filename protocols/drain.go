package protocols

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DrainFlag is the client option that bounds its own drain (Warden's load
// client, docs/loadgen.md). Seed 002, A-P3-5 (drain quarantine): "Drain is
// post-measurement and serves as a hang watchdog"; A-P3-3: exceeding the
// allowance "does not authorize cancellation, truncation". A client that
// gives up on its requests sooner than its class's allowance would cut the
// drain the class allows, and the cut drain would pass the drain gate: the
// plan refuses such a client.
const DrainFlag = "--drain-timeout-seconds"

// shellDrainFlag finds the flag's value in a shell command.
var shellDrainFlag = regexp.MustCompile(regexp.QuoteMeta(DrainFlag) + `(?:=|\s+)(\S+)`)

func formatSeconds(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }

// checkClientDrain reads the drain bound the run's client is given (the
// value of DrainFlag, after the plan's variables) into r.ClientDrainS and
// refuses one shorter than the class's drain allowance, or one the plan
// cannot read, naming the client argument that carries it.
func (b *builder) checkClientDrain(r *Run, load *Load) {
	field := "loads." + load.Name + ".client"
	pos, val, found := Pos{}, "", false
	if r.Client.Shell != "" {
		if m := shellDrainFlag.FindStringSubmatch(r.Client.Shell); m != nil {
			pos, val, found = firstPos(load.Client.ArgPos, load.Client.Pos), strings.Trim(m[1], `'"`), true
		}
	} else {
		for i, a := range r.Client.Argv {
			switch {
			case a == DrainFlag && i+1 < len(r.Client.Argv):
				val, found = r.Client.Argv[i+1], true
				pos, field = firstPos(load.Client.ArgPos[min(i+1, len(load.Client.ArgPos)):], load.Client.Pos), fmt.Sprintf("%s[%d]", field, i+1)
			case strings.HasPrefix(a, DrainFlag+"="):
				val, found = strings.TrimPrefix(a, DrainFlag+"="), true
				pos, field = firstPos(load.Client.ArgPos[min(i, len(load.Client.ArgPos)):], load.Client.Pos), fmt.Sprintf("%s[%d]", field, i)
			}
		}
	}
	if !found {
		return
	}
	s, err := strconv.ParseFloat(Unescape(val), 64)
	if err != nil || s <= 0 {
		b.c.add(pos, field, "the client's %s %q is not a positive number of seconds the plan can read (write \"${DRAIN_WATCHDOG_S}\", the class's watchdog)", DrainFlag, Unescape(val))
		return
	}
	r.ClientDrainS = &s
	if r.Class != "" && s < r.DrainS {
		b.c.add(pos, field, "the client's %s %s is shorter than the %s s drain allowance of class %s: the client would abandon requests the class allows to drain (write \"${DRAIN_WATCHDOG_S}\", the class's %s s watchdog)",
			DrainFlag, formatSeconds(s), formatSeconds(r.DrainS), r.Class, formatSeconds(r.WatchdogS))
	}
}
