package protocols

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

func readMini(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/mini.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMiniIsValid(t *testing.T) {
	p, err := PlanBytes("mini.yaml", []byte(readMini(t)), Options{})
	if err != nil {
		t.Fatalf("mini protocol: %v", err)
	}
	var ids []string
	for _, r := range p.Runs {
		ids = append(ids, r.ID)
	}
	if got, want := strings.Join(ids, " "), "A.sat A.mod B.sat B.mod"; got != want {
		t.Fatalf("runs = %s, want %s", got, want)
	}
	if p.PrivacyMinLeakBytes != DefaultMinLeakBytes {
		t.Fatalf("privacy leak length %d, want the default %d", p.PrivacyMinLeakBytes, DefaultMinLeakBytes)
	}
	if got := p.Runs[1].NeedVars["NEED_SAT_DIR"]; got != "A.sat" {
		t.Fatalf("A.mod NEED_SAT_DIR = %q", got)
	}
}

// Each case edits the valid mini protocol into a malformed one and names
// the exact problem it must produce.
func TestProblems(t *testing.T) {
	cases := []struct {
		name     string
		old, new string // replace the first old with new; old "" means the whole file is new
		line     int
		col      int // 0: not checked
		field    string
		msg      string
	}{
		{"unknown key", `host: {gpus: 2, cpus: 4}`, `host: {gpus: 2, cpus: 4, gpu: 3}`, 3, 26, "host.gpu",
			`unknown field "gpu" in host (known fields: cpus, gpu_model, gpus, name, numa_nodes)`},
		{"duplicate key", "name: mini\n", "name: mini\nname: other\n", 3, 1, "name",
			`duplicate key "name" (first given at line 2)`},
		{"wrong type", `host: {gpus: 2,`, `host: {gpus: two,`, 3, 14, "host.gpus",
			`expected a whole number, got "two"`},
		{"wrong type list", `gpus: [0], cpus: "0-1"`, `gpus: 0, cpus: "0-1"`, 6, 22, "slots[0].gpus",
			`expected a list, got the number 0`},
		{"missing required", `budget: {cap_gpu_hours: 1.0}`, `budget: {unit: H20-hours}`, 4, 9, "budget.cap_gpu_hours",
			`required field "cap_gpu_hours" is missing from budget`},
		{"missing section", "phases:\n  - name: main\n    kind: primary\n    matrix: {pattern: [A, B]}\n    loads: [sat, mod]\n", "", 1, 1, "phases",
			`required field "phases" is missing from the protocol`},
		{"client drain short", `client: [standin, client, --result-dir, "${ATTEMPT_DIR}"]`, `client: [standin, client, --result-dir, "${ATTEMPT_DIR}", --drain-timeout-seconds, "9"]`, 20, 0, "loads.sat.client[5]",
			`the client's --drain-timeout-seconds 9 is shorter than the 10 s drain allowance of class std: the client would abandon requests the class allows to drain (write "${DRAIN_WATCHDOG_S}", the class's 20 s watchdog)`},
		{"client drain short =", `client: [standin, client, --result-dir, "${ATTEMPT_DIR}"]`, `client: [standin, client, --drain-timeout-seconds=5]`, 20, 0, "loads.sat.client[2]",
			`the client's --drain-timeout-seconds 5 is shorter than the 10 s drain allowance of class std: the client would abandon requests the class allows to drain (write "${DRAIN_WATCHDOG_S}", the class's 20 s watchdog)`},
		{"client drain unreadable", `client: [standin, client, --result-dir, "${ATTEMPT_DIR}"]`, `client: [standin, client, --drain-timeout-seconds, "${ATTEMPT}"]`, 20, 0, "loads.sat.client[3]",
			`the client's --drain-timeout-seconds "${ATTEMPT}" is not a positive number of seconds the plan can read (write "${DRAIN_WATCHDOG_S}", the class's watchdog)`},
		{"client drain shell", `client: [standin, client, --result-dir, "${ATTEMPT_DIR}"]`, `client: {shell: "standin client --drain-timeout-seconds 3"}`, 20, 0, "loads.sat.client",
			`the client's --drain-timeout-seconds 3 is shorter than the 10 s drain allowance of class std: the client would abandon requests the class allows to drain (write "${DRAIN_WATCHDOG_S}", the class's 20 s watchdog)`},
		{"prepare removed", `values: [{id: A}`, `values: [{id: A, prepare: [make, manifest]}`, 28, 22, "axes[0].values[0].prepare",
			"prepare steps are not part of the format: nothing would run them, and every input must exist before controller start, which hashes the provenance files (the manifests among them) and refuses one that is missing. Materialize the inputs first (e.g. loadgen materialize), list them under provenance:, then start"},
		{"manifest not recorded", `client: [standin, client, --result-dir, "${ATTEMPT_DIR}"]`, `client: [standin, client, --result-dir, "${ATTEMPT_DIR}"]
    manifest: "/data/${PATTERN}.jsonl"`, 21, 15, "loads.sat.manifest",
			`the manifest "/data/A.jsonl" (of run A.sat) is not among the provenance files, so it has no hash recorded at start to check (provenance: none)`},
		{"reserve mode", `budget: {cap_gpu_hours: 1.0}`, `budget: {cap_gpu_hours: 1.0, reserve: worst}`, 4, 39, "budget.reserve",
			`reserve is nominal or bounds, got "worst"`},
		{"leak length below the floor", `budget: {cap_gpu_hours: 1.0}`, "budget: {cap_gpu_hours: 1.0}\nprivacy: {min_leak_bytes: 8}", 5, 27, "privacy.min_leak_bytes",
			`must be at least 16 bytes (shorter runs of a prompt turn up by chance), got 8`},
		{"executor kind", `budget: {cap_gpu_hours: 1.0}`, "budget: {cap_gpu_hours: 1.0}\nexecutor: {kind: kubernetes}", 5, 18, "executor.kind",
			`executor is local or slurm, got "kubernetes"`},
		{"slurm settings without slurm", `budget: {cap_gpu_hours: 1.0}`, "budget: {cap_gpu_hours: 1.0}\nexecutor: {slurm: {partition: gpu}}", 5, 19, "executor.slurm",
			`slurm settings need executor.kind: slurm`},
		{"exclusive steps on too few nodes", `budget: {cap_gpu_hours: 1.0}`, "budget: {cap_gpu_hours: 1.0}\nexecutor: {kind: slurm, slurm: {exclusive: true, nodes: 1}}", 5, 57, "executor.slurm.nodes",
			`exclusive steps take a node each: regime two (regimes[0]) runs 2 at once on 1 node(s)`},
		{"admission end", "    expected_s: 10\n    client: [standin, client, --result-dir", "    expected_s: 10\n    admission_end: exit\n    client: [standin, client, --result-dir", 20, 20, "loads[0].admission_end",
			`admission_end is phase-file or result-file, got "exit"`},
		{"deadline", "    expected_s: 10\n    client: [standin, client, --result-dir", "    expected_s: 10\n    deadline_s: 0\n    client: [standin, client, --result-dir", 20, 17, "loads[0].deadline_s",
			`the measuring deadline must be positive, got 0`},
		{"expectation with both", `command: [standin, server, --port, "${PORT}"]`, "command: [standin, server, --port, \"${PORT}\"]\n    expect: [{name: x, pattern: a, path: b.c, equals: 1}]", 16, 14, "servers[0].expect[0]",
			`an expectation is a log pattern or a path with its value (equals), not both`},
		{"expectation path without equals", `command: [standin, server, --port, "${PORT}"]`, "command: [standin, server, --port, \"${PORT}\"]\n    expect: [{name: x, path: b.c}]", 16, 14, "servers[0].expect[0].equals",
			`the expectation at path "b.c" needs the value it must hold (equals)`},
		{"expectation path on a kind without a config endpoint", "kind: standin\n    command: [standin, server, --port, \"${PORT}\"]",
			"kind: sglang-omni\n    command: [standin, server, --port, \"${PORT}\"]\n    expect: [{name: seqs, path: max_running_requests, equals: 8}]", 16, 33, "servers.srv.expect.seqs",
			`expectation "seqs" reads path "max_running_requests" of the server's reported configuration, but a server of kind sglang-omni reports none (no config endpoint): check it by a pattern on the startup log, or give config_endpoint`},
		{"expectation value not a scalar", `command: [standin, server, --port, "${PORT}"]`, "command: [standin, server, --port, \"${PORT}\"]\n    expect: [{name: x, path: b.c, equals: [1]}]", 16, 43, "servers[0].expect[0].equals",
			`expected a number, true, false, null or a string, got a list`},
		{"unknown variable", `"${PORT}"]`, `"${PROT}"]`, 15, 40, "servers.srv.command[3]",
			`unknown variable ${PROT}`},
		{"need variable not declared", `"${ATTEMPT_DIR}"]`, `"${NEED_MOD_DIR}"]`, 20, 45, "loads.sat.client[3]",
			`unknown variable ${NEED_MOD_DIR} (this load does not need a run exported under that name)`},
		{"bare dollar", `"${ATTEMPT_DIR}"]`, `"$ATTEMPT_DIR"]`, 20, 45, "loads.sat.client[3]",
			`$ATTEMPT_DIR is not expanded (commands run without a shell): write ${ATTEMPT_DIR}, or $$ for a literal $`},
		{"unclosed variable", `"${PORT}"]`, `"${PORT"]`, 15, 40, "servers.srv.command[3]",
			`unclosed ${ (write $$ for a literal $)`},
		{"need on missing run", `needs: [sat]`, `needs: [{run: "X.sat", as: SAT}]`, 23, 13, "needs",
			`run A.mod needs run "X.sat", which the protocol does not define`},
		{"need on missing load", `needs: [sat]`, `needs: [sad]`, 23, 13, "loads[1].needs[0]",
			`needs load "sad", which is not defined`},
		{"dependency cycle", "    kind: saturation\n", "    kind: saturation\n    needs: [mod]\n", 24, 13, "needs",
			`dependency cycle: A.sat -> A.mod -> A.sat`},
		{"overlapping cpus", `cpus: "2-3", port: 9001`, `cpus: "1-3", port: 9001`, 7, 33, "slots[1].cpus",
			`CPUs 1 are also in slot s0; CPU masks of slots must be disjoint`},
		{"gpu outside host", `gpus: [1], cpus: "2-3"`, `gpus: [2], cpus: "2-3"`, 7, 22, "slots[1].gpus",
			`GPU 2 is outside the host, which has GPUs 0-1`},
		{"shared gpu", `gpus: [1], cpus: "2-3"`, `gpus: [0], cpus: "2-3"`, 7, 22, "slots[1].gpus",
			`GPU 0 is already in slot s0; slots cannot share GPUs`},
		{"cpu outside host", `cpus: "2-3"`, `cpus: "2-5"`, 7, 33, "slots[1].cpus",
			`CPUs 4-5 are outside the host, which has CPUs 0-3`},
		{"bad cpu list", `cpus: "2-3"`, `cpus: "2-x"`, 7, 33, "slots[1].cpus",
			`"2-x" is not a CPU range (write low-high, low <= high)`},
		{"numa outside host", `cpus: "2-3", port`, `cpus: "2-3", numa: 3, port`, 7, 46, "slots[1].numa",
			`NUMA node 3 is outside the host, which has nodes 0-0`},
		{"duplicate port", `port: 9001`, `port: 9000`, 7, 46, "slots[1].port",
			`port 9000 is already slot s0's`},
		{"zero budget", `cap_gpu_hours: 1.0`, `cap_gpu_hours: 0`, 4, 25, "budget.cap_gpu_hours",
			`the GPU-hour cap must be positive, got 0`},
		{"negative budget", `cap_gpu_hours: 1.0`, `cap_gpu_hours: -2.5`, 4, 25, "budget.cap_gpu_hours",
			`the GPU-hour cap must be positive, got -2.5`},
		{"consumed over cap", `cap_gpu_hours: 1.0}`, `cap_gpu_hours: 1.0, consumed_gpu_hours: 1.5}`, 4, 50, "budget.consumed_gpu_hours",
			`1.5 GPU-hours already consumed leaves nothing under the cap of 1`},
		{"empty matrix", `matrix: {pattern: [A, B]}`, `matrix: {pattern: [A, B], exclude: [{pattern: [A, B]}]}`, 32, 13, "phases[0].matrix",
			`the matrix selects no cells`},
		{"unknown axis", `matrix: {pattern: [A, B]}`, `matrix: {pattern: [A, B], color: red}`, 32, 38, "phases[0].matrix.color",
			`unknown axis "color" (axes: pattern)`},
		{"unknown axis value", `matrix: {pattern: [A, B]}`, `matrix: {pattern: [A, C]}`, 32, 23, "phases[0].matrix.pattern",
			`axis "pattern" has no value "C"`},
		{"duplicate run ids", "    kind: primary\n", "    kind: primary\n    id: x.${LOAD}\n", 34, 12, "",
			`two runs have the id "x.sat" (the first is defined at line 34); give the phase an id: template that tells them apart`},
		{"unsafe run id", `values: [{id: A}, {id: B}]`, `values: [{id: A}, {id: "../B"}]`, 28, 28, "axes[0].values[1].id",
			`axis value "../B" is not a safe path component: use letters, digits, '.', '_' and '-', starting with a letter or digit, without ".."`},
		{"unsafe run id template", "    kind: primary\n", "    kind: primary\n    id: run/${CELL_ID}.${LOAD}\n", 32, 9, "phases[0].id",
			`run id "run/A.sat" is not a safe path component: use letters, digits, '.', '_' and '-', starting with a letter or digit, without ".."`},
		{"unknown load in phase", `loads: [sat, mod]`, `loads: [sat, mad]`, 33, 12, "phases[0].loads[1]",
			`unknown load "mad" (loads: mod, sat)`},
		{"unknown class", `values: [{id: A}, {id: B}]`, `values: [{id: A, class: fast}, {id: B}]`, 28, 29, "axes[0].values[0].class",
			`unknown class "fast" (classes: std)`},
		{"unknown server", "    kind: moderate\n", "    kind: moderate\n    server: sglang\n", 23, 13, "loads[1].server",
			`unknown server "sglang" (servers: srv)`},
		{"unknown slot in regime", `{name: two, concurrency: 2}`, `{name: two, concurrency: 2, slots: [s0, s9]}`, 9, 0, "regimes[0].slots[1]",
			`unknown slot "s9" (slots: s0, s1)`},
		{"unknown load kind", `kind: saturation`, `kind: saturate`, 18, 11, "loads[0].kind",
			`unknown load kind "saturate" (known: aa, background, burn-in, closed-loop, cold-start, confirmation, moderate, open-loop, saturation, smoke, stress)`},
		{"concurrency over slots", `concurrency: 2}`, `concurrency: 3}`, 9, 30, "regimes[0].concurrency",
			`concurrency 3 needs 3 slots; the protocol declares 2`},
		{"gated regime without check", `concurrency: 2}`, `concurrency: 2, gated: true}`, 9, 40, "regimes.two",
			`regime "two" is gated but no co-location check validates it`},
		{"unknown order", "    kind: primary\n", "    kind: primary\n    order: random\n", 32, 12, "phases[0].order.by",
			`unknown order "random" (listed, sha256, shuffle, alternate)`},
		{"sha256 order without key", "    kind: primary\n", "    kind: primary\n    order: {by: sha256}\n", 32, 12, "phases[0].order.key",
			`order by sha256 needs a key template, e.g. key: "SEED:${PATTERN}:${CONFIG}"`},
		{"format version", `warden: 1`, `warden: 2`, 1, 9, "warden",
			`protocol format 2 is not supported; this controller reads format 1`},
		{"watchdog shorter than allowance", `watchdog_s: 20`, `watchdog_s: 5`, 11, 52, "classes[0].watchdog_s",
			`the hard watchdog (5 s) must not be shorter than the drain allowance (10 s)`},
		{"bad expect regexp", "    kind: standin\n", "    kind: standin\n    expect: [{name: x, pattern: \"(\"}]\n", 15, 33, "servers[0].expect[0].pattern",
			"not a valid regular expression: error parsing regexp: missing closing ): `(`"},
		{"empty command", `client: [standin, client, --from, "${NEED_SAT_DIR}"]`, `client: []`, 25, 13, "loads[1].client",
			`command is empty`},
		{"merge key", "host: {gpus: 2, cpus: 4}", "host: {<<: {gpus: 2}, cpus: 4}", 3, 8, "host",
			`merge keys (<<) are not supported; write the fields out`},
		{"port neither number nor auto", `port: 9001}`, `port: any}`, 7, 0, "slots[1].port",
			`expected a TCP port number or auto, got "any"`},
		{"yaml syntax", "slots:\n", "slots: [\n", 5, 0, "",
			`not valid YAML: did not find expected node content`},
		// yaml.v3 names the line, counted from 0, where the enclosing list began
		{"yaml indentation in a list item", "    kind: standin\n", "   kind: standin\n", 14, 0, "servers[0]",
			`not valid YAML: did not find expected '-' indicator`},
		{"yaml indentation out of a list item", "    expected_s: 10\n    client: [standin, client, --result-dir", "    expected_s: 10\n  client: [standin, client, --result-dir", 20, 0, "loads",
			`not valid YAML: did not find expected '-' indicator`},
		{"yaml over-indented", "    kind: standin\n", "      kind: standin\n", 14, 0, "servers[0].name",
			`not valid YAML: mapping values are not allowed in this context`},
		{"yaml flow mapping not closed", "host: {gpus: 2, cpus: 4}", "host: {gpus: 2, cpus: 4", 3, 0, "",
			`not valid YAML: did not find expected ',' or '}'`},
		{"yaml tab", "    kind: saturation\n", "    kind: saturation\n\tfoo: 1\n", 19, 0, "loads",
			`not valid YAML: found a tab character that violates indentation`},
		{"empty file", "", "", 1, 0, "",
			`the file is empty: a protocol starts with "warden: 1"`},
		{"not a mapping", "", "- a\n- b\n", 1, 1, "",
			`a protocol is a mapping of fields, starting with "warden: 1"`},
		{"two documents", "", "warden: 1\n---\nname: x\n", 2, 1, "",
			`a protocol file holds one YAML document; found a second one`},
	}
	base := readMini(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// an unknown name of a mapping or an enumeration comes with the
			// names that are allowed (variables are listed in docs/protocol.md)
			if strings.HasPrefix(tc.msg, "unknown ") && !strings.HasPrefix(tc.msg, "unknown variable") && !strings.Contains(tc.msg, " (") {
				t.Errorf("%q does not list the allowed names", tc.msg)
			}
			text := tc.new
			if tc.old != "" {
				if !strings.Contains(base, tc.old) {
					t.Fatalf("test bug: %q not in mini.yaml", tc.old)
				}
				text = strings.Replace(base, tc.old, tc.new, 1)
			} else if tc.name == "missing section" {
				text = strings.Replace(base, "phases:\n  - name: main\n    kind: primary\n    matrix: {pattern: [A, B]}\n    loads: [sat, mod]\n", "", 1)
			}
			_, err := PlanBytes("bad.yaml", []byte(text), Options{})
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("want *Problems, got %v", err)
			}
			for _, p := range ps.List {
				if p.Msg == tc.msg {
					if p.File != "bad.yaml" || p.Pos.Line != tc.line || (tc.col != 0 && p.Pos.Column != tc.col) || p.Field != tc.field {
						t.Fatalf("problem %q at %s:%d:%d field %q; want line %d col %d field %q", p.Msg, p.File, p.Pos.Line, p.Pos.Column, p.Field, tc.line, tc.col, tc.field)
					}
					return
				}
			}
			t.Fatalf("no problem %q; got:\n%v", tc.msg, err)
		})
	}
	if len(cases) < 25 {
		t.Fatalf("only %d malformed protocols", len(cases))
	}
}

func TestAllProblemsReported(t *testing.T) {
	text := strings.NewReplacer(
		`host: {gpus: 2, cpus: 4}`, `host: {gpus: 2, cpus: 4, color: red}`,
		`cap_gpu_hours: 1.0`, `cap_gpu_hours: 0`,
		`port: 9001`, `port: 9000`,
	).Replace(readMini(t))
	_, err := PlanBytes("bad.yaml", []byte(text), Options{})
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want problems, got %v", err)
	}
	if len(ps.List) != 3 {
		t.Fatalf("want 3 problems, got %d:\n%v", len(ps.List), err)
	}
	if ps.List[0].Pos.Line != 3 || ps.List[1].Pos.Line != 4 || ps.List[2].Pos.Line != 7 {
		t.Fatalf("problems not in file order:\n%v", err)
	}
}

func TestProblemLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString(readMini(t))
	b.WriteString("extra:\n")
	for i := range MaxErrors + 20 {
		b.WriteString("  - x\n")
		_ = i
	}
	// every slot port duplicated many times
	text := readMini(t)
	var slots strings.Builder
	for i := range MaxErrors + 20 {
		slots.WriteString("  - {name: s" + itoa(i+2) + ", gpus: [9], cpus: \"0\", port: 9000}\n")
	}
	text = strings.Replace(text, "regimes:\n", slots.String()+"regimes:\n", 1)
	_, err := PlanBytes("bad.yaml", []byte(text), Options{})
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want problems, got %v", err)
	}
	if len(ps.List) != MaxErrors || ps.Omitted == 0 {
		t.Fatalf("listed %d, omitted %d; want %d listed and some omitted", len(ps.List), ps.Omitted, MaxErrors)
	}
	if !strings.Contains(err.Error(), "more problems not shown") {
		t.Fatalf("error text does not say problems were omitted")
	}
}

// TestPortAuto: port: auto leaves the port to controller start, and the
// plan says so.
func TestPortAuto(t *testing.T) {
	text := strings.Replace(readMini(t), `port: 9001}`, `port: auto}`, 1)
	p, err := PlanBytes("mini.yaml", []byte(text), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Slots[1]; !s.PortAuto || s.Port != 0 || p.Slots[0].PortAuto || p.Slots[0].Port != 9000 {
		t.Fatalf("slots %+v", p.Slots)
	}
}

// A FIFO or a device given as the protocol is refused, naming it, instead
// of blocking the reader.
func TestPlanFileRefusesWhatIsNotARegularFile(t *testing.T) {
	fifo := t.TempDir() + "/protocol.yaml"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		if _, err := PlanFile(path, Options{}); err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v", path, err)
		}
	}
}
