package testcampaign

import (
	"fmt"
	"strings"
)

// Head is the start of a test protocol: its name, a host of one GPU and
// one CPU for each port, the budget cap, the variables (the inside of the
// vars mapping) and slot sI on GPU I and CPU I for each port.
func Head(name, capGPUHours, vars string, ports []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "warden: 1\nname: %s\nhost: {gpus: %d, cpus: %d}\nbudget: {cap_gpu_hours: %s}\nvars: {%s}\nslots:\n",
		name, len(ports), len(ports), capGPUHours, vars)
	for i, p := range ports {
		fmt.Fprintf(&b, "  - {name: s%d, gpus: [%d], cpus: \"%d\", port: %d}\n", i, i, i, p)
	}
	return b.String()
}

// PatternIDs is the cells p1..pN as the items of a YAML flow list.
func PatternIDs(n int) string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("p%d", i+1))
	}
	return strings.Join(ids, ", ")
}

// patternValues is the values p1..pN of the pattern axis as the items of
// a YAML flow list, each setting DRAIN_EXTRA: "2" where late(i) holds for
// its 0-based index i (its client drains 2 s longer than needed), "0"
// elsewhere.
func patternValues(n int, late func(i int) bool) string {
	var vals []string
	for i := range n {
		extra := "0"
		if late != nil && late(i) {
			extra = "2"
		}
		vals = append(vals, fmt.Sprintf("{id: p%d, vars: {DRAIN_EXTRA: %q}}", i+1, extra))
	}
	return strings.Join(vals, ", ")
}

// Standin is the body of a test protocol below its Head: regime two of
// concurrency 2, class c, the server standin, the load saturation and the
// load moderate that needs it, the axis pattern and the primary phase
// matrix over it. Every field but Cells is written as it is: the callers
// give their defaults (Or).
type Standin struct {
	// DrainS and WatchdogS are class c's drain allowance and watchdog;
	// CleanupS the cleanup timeout.
	DrainS, WatchdogS, CleanupS string
	Server                      string // the server command (a YAML flow value)
	ReadyS                      string // the server's ready timeout
	Expect                      string // the server's expectations (a YAML flow list)
	ExpectedS                   string // both loads' expected_s
	Client                      string // the saturation client (a YAML flow value)
	// Saturation holds extra YAML lines of the saturation load (indented
	// by four); none when "".
	Saturation     string
	ModerateClient string // the moderate client (a YAML flow value)
	// Cells is how many cells p1..pN the pattern axis has; 1 when 0.
	// Late(i) says whether the client of the 0-based cell i drains 2 s
	// longer than needed (its DRAIN_EXTRA); none when nil.
	Cells int
	Late  func(i int) bool
	// Moderate puts the moderate load in the phase beside saturation.
	Moderate bool
	Retries  int // infrastructure retries
	// Quarantined is stop.quarantined_fraction_gt.
	Quarantined string
}

// YAML is the body as protocol text.
func (s Standin) YAML() string {
	saturation := ""
	if s.Saturation != "" {
		saturation = s.Saturation + "\n"
	}
	if s.Cells == 0 {
		s.Cells = 1
	}
	loads := "[saturation]"
	if s.Moderate {
		loads = "[saturation, moderate]"
	}
	return fmt.Sprintf(`regimes:
  - {name: two, concurrency: 2}
classes:
  - {name: c, drain_allowance_s: %s, watchdog_s: %s}
cleanup: {timeout_s: %s}
servers:
  - name: standin
    kind: standin
    command: %s
    ready_timeout_s: %s
    shutdown_grace_s: 2
    group_grace_s: 1
    expect: %s
loads:
  - name: saturation
    kind: saturation
    expected_s: %s
    client: %s
%s  - name: moderate
    kind: moderate
    needs: [saturation]
    expected_s: %s
    env: {SATURATION: "${NEED_SATURATION_DIR}"}
    client: %s
axes:
  - name: pattern
    values: [%s]
phases:
  - name: matrix
    kind: primary
    matrix: {pattern: [%s]}
    loads: %s
retries: {infrastructure: %d}
stop: {quarantined_fraction_gt: %s}
`, s.DrainS, s.WatchdogS, s.CleanupS, s.Server, s.ReadyS, s.Expect, s.ExpectedS, s.Client, saturation,
		s.ExpectedS, s.ModerateClient, patternValues(s.Cells, s.Late), PatternIDs(s.Cells), loads, s.Retries, s.Quarantined)
}

// Or is v, or d when v is "": a protocol field's default.
func Or(v, d string) string {
	if v == "" {
		return d
	}
	return v
}
