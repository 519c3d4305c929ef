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

// PatternValues is the values p1..pN of the pattern axis as the items of
// a YAML flow list, each setting DRAIN_EXTRA: "2" where late(i) holds for
// its 0-based index i (its client drains 2 s longer than needed), "0"
// elsewhere.
func PatternValues(n int, late func(i int) bool) string {
	var vals []string
	for i := range n {
		extra := "0"
		if late(i) {
			extra = "2"
		}
		vals = append(vals, fmt.Sprintf("{id: p%d, vars: {DRAIN_EXTRA: %q}}", i+1, extra))
	}
	return strings.Join(vals, ", ")
}

// Standin is the body of a test protocol below its Head: regime two of
// concurrency 2, class c, the server standin, the load saturation and the
// load moderate that needs it, the axis pattern and the primary phase
// matrix over it. Every field is written as it is: the callers give
// their defaults.
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
	Saturation string
	Moderate   string // the moderate client (a YAML flow value)
	Values     string // the pattern axis's values (PatternValues)
	Cells      string // the phase's cells (PatternIDs)
	Loads      string // the phase's loads (a YAML flow list)
	Retries    int    // infrastructure retries
	// Quarantined is stop.quarantined_fraction_gt.
	Quarantined string
}

// YAML is the body as protocol text.
func (s Standin) YAML() string {
	saturation := ""
	if s.Saturation != "" {
		saturation = s.Saturation + "\n"
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
		s.ExpectedS, s.Moderate, s.Values, s.Cells, s.Loads, s.Retries, s.Quarantined)
}
