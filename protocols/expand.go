package protocols

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"warden/internal/cpulist"
)

// cell is one point of a matrix: a value per axis, in axes order.
type cell struct {
	axes   []string // axis names, in the protocol's axes order
	values []*AxisValue
	repeat int
	pos    Pos
}

func (c cell) id() string {
	ids := make([]string, len(c.values))
	for i, v := range c.values {
		ids[i] = v.ID
	}
	return strings.Join(ids, ".")
}

func (c cell) display() string {
	ids := make([]string, len(c.values))
	for i, v := range c.values {
		ids[i] = v.ID
	}
	return strings.Join(ids, "/")
}

func (b *builder) expand() *Plan {
	p := b.p
	plan := b.planHeader()
	base := b.baseVars()
	for i, cmd := range p.Ledger {
		plan.Ledger = append(plan.Ledger, b.command(cmd, fmt.Sprintf("ledger[%d]", i), base, nil))
	}

	for i := range p.Phases {
		ph := &p.Phases[i]
		before := len(b.runs)
		cells := 0
		if ph.Kind == "colocation" && ph.Colocation != nil {
			cells = b.expandColocation(ph, i)
			if ph.Prior != nil {
				b.runs = b.runs[:before] // the check ran before: no run of it
				cells = 0
			}
		} else if ph.Kind == "capacity" && ph.Capacity != nil && ph.Matrix != nil && len(ph.Loads) > 0 {
			cells = b.expandCapacityPhase(ph, i)
		} else if ph.Matrix != nil && len(ph.Loads) > 0 {
			cells = b.expandMatrixPhase(ph, i)
		}
		info := PhaseInfo{Name: ph.Name, Kind: ph.Kind, Order: ph.Order.By, Runs: len(b.runs) - before, Cells: cells}
		if ph.Prior != nil && ph.Kind == "colocation" {
			info.Prior = b.prior(ph, plan)
		}
		if ph.Kind == "capacity" && ph.Capacity != nil {
			info.Capacity = capacitySpec(ph.Capacity)
		}
		plan.Phases = append(plan.Phases, info)
	}
	b.checkGatedRegimes()
	b.resolveNeeds()

	for i := range b.runs {
		b.runs[i].Index = i
	}
	plan.Runs = b.runs
	plan.Gates = b.gates
	b.powerCheck(plan)
	b.regimeInfo(plan)
	for i := range plan.Runs {
		if r := &plan.Runs[i]; r.Regime == "" {
			r.Regime = plan.Regime
			if ph := b.phase(r.Phase); ph != nil && ph.Regime != "" {
				r.Regime = ph.Regime
			}
		}
	}
	if len(b.c.list) == 0 {
		b.estimate(plan)
		if plan.Executor.Kind == "slurm" {
			plan.SlurmRequests = plan.slurmRequests()
		}
	}
	return plan
}

// planHeader is the plan of the protocol without its runs: its settings
// with their defaults, its slots and its provenance.
func (b *builder) planHeader() *Plan {
	p := b.p
	plan := &Plan{
		Schema: PlanSchema,
		Protocol: ProtocolInfo{
			Name: p.Name, Title: p.Title, Frozen: p.Frozen, Format: p.Warden,
			Workdir: p.Workdir, Unit: p.Budget.Unit,
		},
		Classes:  p.Classes,
		Seeds:    p.Seeds,
		Retries:  p.Retries.Infrastructure,
		Privacy:  p.Privacy.ForbiddenFields,
		CleanupS: p.Cleanup.TimeoutS,
		Stop: StopInfo{QuarantinedFractionGT: p.Stop.QuarantinedFractionGT, FailedFractionGT: p.Stop.FailedFractionGT,
			MinFreeGB: p.Stop.MinFreeGB, MaxArtifactsGB: p.Stop.MaxArtifactsGB},
	}
	plan.Executor = ExecutorInfo{Kind: "local"}
	if p.Executor.Kind == "slurm" {
		sx := p.Executor.Slurm
		plan.Executor = ExecutorInfo{Kind: "slurm", Slurm: &SlurmInfo{Partition: sx.Partition, Account: sx.Account,
			Constraint: sx.Constraint, Exclusive: sx.Exclusive, QueueTimeoutS: sx.QueueTimeoutS, Nodes: sx.Nodes}}
	}
	plan.SampleS = 1
	if p.SampleIntervalS != nil {
		plan.SampleS = *p.SampleIntervalS
	}
	plan.IdleSettleS = p.IdleSettleS
	if _, given := p.Privacy.Meta.Fields["forbidden_fields"]; !given {
		plan.Privacy = DefaultForbiddenFields
	}
	plan.PrivacyMinLeakBytes = DefaultMinLeakBytes
	if p.Privacy.MinLeakBytes != nil {
		plan.PrivacyMinLeakBytes = *p.Privacy.MinLeakBytes
	}
	if plan.Protocol.Workdir == "" {
		plan.Protocol.Workdir = "."
	}
	for _, s := range p.Slots {
		info := SlotInfo{Name: s.Name, GPUs: s.GPUs, CPUs: s.CPUs, NUMA: s.NUMA, Port: s.Port.N, PortAuto: s.Port.Auto}
		if si := b.slots[s.Name]; si != nil && si.cpus != nil {
			info.CPUs = cpulist.Format(si.cpus)
		}
		plan.Slots = append(plan.Slots, info)
	}
	for _, pf := range p.Provenance {
		pi := ProvenanceInfo{Path: pf.Path, Role: pf.Role, Private: pf.Private, SHA256: pf.SHA256, Shards: pf.Shards}
		if pf.SHA256 != "" {
			pi.SHA256At = Problem{File: b.c.file, Pos: pf.Meta.At("sha256")}.Where()
		}
		plan.Provenance = append(plan.Provenance, pi)
	}
	return plan
}

func (b *builder) baseVars() map[string]string {
	vars := map[string]string{}
	for k, v := range b.p.Vars {
		vars[k] = v
	}
	return vars
}

// matrixCells expands a matrix into its cells, in declaration order.
func (b *builder) matrixCells(m *Matrix, f string) []cell {
	x := &matrix{b: b, m: m}
	for _, a := range b.p.Axes {
		if _, ok := m.Axes[a.Name]; ok {
			x.names = append(x.names, a.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.Axes)) {
		if b.axes[name] == nil {
			b.c.add(m.Axes[name].Pos, f+"."+name, "unknown axis %q (axes: %s)", name, strings.Join(slices.Sorted(maps.Keys(b.axes)), ", "))
		}
	}
	seen := map[string]bool{}
	var out []cell
	add := func(cells []cell) {
		for _, cl := range cells {
			if !seen[cl.id()] {
				seen[cl.id()] = true
				out = append(out, cl)
			}
		}
	}
	add(x.product(m.Axes, f))
	for i, inc := range m.Include {
		for name := range inc {
			if _, ok := m.Axes[name]; !ok {
				b.c.add(inc[name].Pos, fmt.Sprintf("%s.include[%d].%s", f, i, name), "axis %q is not in this matrix (its axes: %s)", name, strings.Join(x.names, ", "))
			}
		}
		add(x.product(inc, fmt.Sprintf("%s.include[%d]", f, i)))
	}
	for i, ex := range m.Exclude {
		out = x.exclude(out, ex, fmt.Sprintf("%s.exclude[%d]", f, i))
	}
	if len(out) == 0 && len(x.names) > 0 {
		b.c.add(m.Pos, f, "the matrix selects no cells")
	}
	return out
}

// matrix is a phase's matrix being expanded into cells.
type matrix struct {
	b     *builder
	m     *Matrix
	names []string // axes of the matrix, in protocol order
}

// lookup returns the values sel selects on axis, reporting (at field)
// those the axis does not have.
func (x *matrix) lookup(axis string, sel Selection, field string) []*AxisValue {
	b := x.b
	var out []*AxisValue
	if len(sel.Values) == 0 {
		b.c.add(sel.Pos, field, "no values selected for axis %q", axis)
	}
	for _, id := range sel.Values {
		v := b.values[axis][id]
		if v == nil {
			if b.axes[axis] != nil {
				b.c.add(sel.Pos, field, "axis %q has no value %q", axis, id)
			}
			continue
		}
		out = append(out, v)
	}
	return out
}

// product returns the cells of the selection sel: every combination of
// its values, one per axis of the matrix.
func (x *matrix) product(sel map[string]Selection, field string) []cell {
	cells := []cell{{}}
	for _, name := range x.names {
		s, ok := sel[name]
		if !ok {
			x.b.c.add(x.m.Pos, field, "must give a value for every axis of the matrix; %q is missing", name)
			return nil
		}
		vals := x.lookup(name, s, field+"."+name)
		var next []cell
		for _, cl := range cells {
			for _, v := range vals {
				n := cell{axes: append(append([]string(nil), cl.axes...), name), values: append(append([]*AxisValue(nil), cl.values...), v), pos: s.Pos}
				next = append(next, n)
			}
		}
		cells = next
	}
	return cells
}

// exclude drops from cells those that match every axis the exclusion ex
// names.
func (x *matrix) exclude(cells []cell, ex map[string]Selection, field string) []cell {
	want := map[string]map[string]bool{}
	for name, sel := range ex {
		if _, ok := x.m.Axes[name]; !ok {
			x.b.c.add(sel.Pos, field+"."+name, "axis %q is not in this matrix (its axes: %s)", name, strings.Join(x.names, ", "))
			continue
		}
		want[name] = map[string]bool{}
		for _, v := range x.lookup(name, sel, field+"."+name) {
			want[name][v.ID] = true
		}
	}
	kept := cells[:0]
	for _, cl := range cells {
		match := len(want) > 0
		for j, name := range cl.axes {
			if w, ok := want[name]; ok && !w[cl.values[j].ID] {
				match = false
			}
		}
		if !match {
			kept = append(kept, cl)
		}
	}
	return kept
}

// order sorts a phase's cells (with repeats) by the phase's order rule.
func (b *builder) order(ph *Phase, cells []cell, f string) []cell {
	var units []cell
	for r := 1; r <= ph.Repeats; r++ {
		for _, cl := range cells {
			cl.repeat = r
			units = append(units, cl)
		}
	}
	o := ph.Order
	shuffleKey := func(cl cell) string {
		return sha256Hex(fmt.Sprintf("%d:%s:%d", o.Seed, cl.id(), cl.repeat))
	}
	sortBy := func(us []cell, key func(cell) string) []cell {
		keys := make([]string, len(us))
		for i, u := range us {
			keys[i] = key(u)
		}
		idx := make([]int, len(us))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return keys[idx[i]] < keys[idx[j]] })
		out := make([]cell, len(us))
		for i, k := range idx {
			out[i] = us[k]
		}
		return out
	}
	switch o.By {
	case "sha256":
		return sortBy(units, func(cl cell) string {
			vars := b.cellVars(ph, cl)
			key, errs := expand(o.Key, func(n string) (string, bool) { v, ok := vars[n]; return v, ok }, nil, false)
			for _, e := range errs {
				b.c.add(o.Meta.At("key"), f+".order.key", "%s", e.msg)
			}
			return sha256Hex(key)
		})
	case "shuffle":
		return sortBy(units, shuffleKey)
	case "alternate":
		groups := map[string][]cell{}
		var keys []string
		for _, u := range units {
			k := ""
			for i, a := range u.axes {
				if a == o.Axis {
					k = u.values[i].ID
				}
			}
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], u)
		}
		for _, k := range keys {
			groups[k] = sortBy(groups[k], shuffleKey)
		}
		var out []cell
		for i := 0; len(out) < len(units); i++ {
			for _, k := range keys {
				if i < len(groups[k]) {
					out = append(out, groups[k][i])
				}
			}
		}
		return out
	}
	return units
}

// cellVars are the plan-time variables of a cell.
func (b *builder) cellVars(ph *Phase, cl cell) map[string]string {
	vars := b.baseVars()
	for _, k := range slices.Sorted(maps.Keys(ph.Vars)) {
		val, errs := expand(ph.Vars[k], func(n string) (string, bool) { x, ok := b.p.Vars[n]; return x, ok }, nil, true)
		for _, e := range errs {
			b.c.add(ph.Meta.At("vars"), fmt.Sprintf("phases.%s.vars.%s", ph.Name, k), "%s (phase vars may use the protocol's vars)", e.msg)
		}
		if !varName.MatchString(k) || isBuiltin(k) {
			b.c.add(ph.Meta.At("vars"), fmt.Sprintf("phases.%s.vars.%s", ph.Name, k), "variable name %q must be upper case letters, digits and _, and not a built-in", k)
		}
		vars[k] = val
	}
	for i, name := range cl.axes {
		v := cl.values[i]
		vars[strings.ToUpper(name)] = v.ID
		for _, k := range slices.Sorted(maps.Keys(v.Vars)) {
			val, errs := expand(v.Vars[k], func(n string) (string, bool) { x, ok := b.p.Vars[n]; return x, ok }, nil, true)
			for _, e := range errs {
				b.c.add(v.Meta.At("vars"), fmt.Sprintf("axes.%s.%s.vars.%s", name, v.ID, k), "%s (axis vars may use the protocol's vars)", e.msg)
			}
			if old, dup := vars[k]; dup && old != val {
				b.c.add(v.Meta.At("vars"), fmt.Sprintf("axes.%s.%s.vars.%s", name, v.ID, k), "variable %s is already set, by the protocol's vars, an axis name or another axis value of cell %s", k, cl.display())
			}
			vars[k] = val
		}
	}
	vars["CELL"] = cl.display()
	vars["CELL_ID"] = cl.id()
	vars["PHASE"] = ph.Name
	vars["REPEAT"] = strconv.Itoa(max(cl.repeat, 1))
	return vars
}

func (b *builder) expandMatrixPhase(ph *Phase, pi int) int {
	f := fmt.Sprintf("phases[%d]", pi)
	cells := b.matrixCells(ph.Matrix, f+".matrix")
	for _, cl := range b.order(ph, cells, f) {
		b.units++
		for _, l := range ph.Loads {
			load := b.loads[l]
			if load == nil {
				continue
			}
			r := b.makeRun(ph, pi, cl, load, "")
			r.Unit = b.units
			b.addRun(r, ph.Meta.At("loads"))
		}
	}
	return len(cells)
}

// expandCapacityPhase plans a capacity search per cell at its worst case:
// every bisection point, the follow-ups and the overload point, each its
// own unit (a fresh server per point). All but the first are conditional:
// the search's recorded results say which run and at what rate.
func (b *builder) expandCapacityPhase(ph *Phase, pi int) int {
	f := fmt.Sprintf("phases[%d]", pi)
	cells := b.matrixCells(ph.Matrix, f+".matrix")
	spec := capacitySpec(ph.Capacity)
	load := b.loads[ph.Loads[0]]
	if load == nil {
		return len(cells)
	}
	for _, cl := range b.order(ph, cells, f) {
		base := b.runID(ph, pi, cl, load.Name)
		pts, suffixes := capacityPoints(spec, ph.Name+"/"+cl.id())
		for k, pt := range pts {
			b.units++
			r := b.makeRun(ph, pi, cl, load, base+"."+suffixes[k])
			r.Unit, r.Capacity = b.units, &pt
			if k > 0 {
				r.Condition = CapacityCondition
			}
			b.addRun(r, ph.Meta.At("loads"))
		}
	}
	return len(cells)
}

// CapacityCondition is the condition of a capacity point that runs only
// when the search's recorded results call for it.
const CapacityCondition = "capacity search"

// runID expands the phase's id template for a cell and load.
func (b *builder) runID(ph *Phase, pi int, cl cell, load string) string {
	tmpl := ph.ID
	pos := ph.Meta.At("id")
	if tmpl == "" {
		tmpl = "${CELL_ID}.${LOAD}"
		if ph.Repeats > 1 {
			tmpl += ".r${REPEAT}"
		}
	}
	vars := b.cellVars(ph, cl)
	vars["LOAD"] = load
	id, errs := expand(tmpl, func(n string) (string, bool) { v, ok := vars[n]; return v, ok }, nil, false)
	for _, e := range errs {
		b.c.add(pos, fmt.Sprintf("phases[%d].id", pi), "%s (a run id may use the cell's variables, LOAD and REPEAT)", e.msg)
	}
	checkID(b.c, pos, fmt.Sprintf("phases[%d].id", pi), "run id", id)
	return id
}

// makeRun builds one run of a cell at a load. idOverride replaces the
// phase's id template (co-location runs).
func (b *builder) makeRun(ph *Phase, pi int, cl cell, load *Load, idOverride string) Run {
	id := idOverride
	if id == "" {
		id = b.runID(ph, pi, cl, load.Name)
	}
	vars := b.cellVars(ph, cl)
	vars["LOAD"] = load.Name
	vars["RUN_ID"] = id
	axes := map[string]string{}
	for i, name := range cl.axes {
		axes[name] = cl.values[i].ID
	}
	r := Run{
		ID: id, Phase: ph.Name, PhaseKind: ph.Kind, Cell: cl.display(), Axes: axes,
		Load: load.Name, Repeat: max(cl.repeat, 1), GPUs: 1, ExpectedS: load.ExpectedS,
		ClientStart: load.ClientStart, NeedVars: map[string]string{},
		AdmissionEnd: load.AdmissionEnd, ResultFile: load.ResultFile,
	}
	r.Kind, r.Measured = runKind(ph, load)
	ch := b.cellChoices(cl, load, &r)
	b.applyClass(&r, load, ch.class, vars)
	server := ch.server
	if server == "" && len(b.p.Servers) > 0 {
		server = b.p.Servers[0].Name
	}
	needAs := map[string]bool{RateVar: ph.Kind == "capacity"}
	for _, n := range load.Needs {
		needAs["NEED_"+n.As+"_DIR"] = true
	}
	if s := b.servers[server]; s != nil {
		r.Server = b.serverSpec(s, ch, vars, needAs)
		if load.ReadyTimeoutS > 0 {
			r.Server.ReadyTimeoutS = load.ReadyTimeoutS
		}
	}
	r.Client = b.command(load.Client, "loads."+load.Name+".client", vars, needAs)
	b.checkClientDrain(&r, load)
	b.runManifest(&r, load, vars)
	r.Env = b.env(load.Env, load.Meta.At("env"), "loads."+load.Name+".env", vars, needAs)
	for _, v := range b.p.Validators {
		if (len(v.Loads) == 0 || slices.Contains(v.Loads, load.Name)) && v.Cells.Selects(axes) && (len(v.Phases) == 0 || slices.Contains(v.Phases, ph.Name)) {
			r.Validators = append(r.Validators, ValidatorSpec{Name: v.Name, Command: b.command(v.Command, "validators."+v.Name+".command", vars, needAs),
				TimeoutS: v.TimeoutS, MemoryMiB: v.MemoryMiB})
		}
	}
	b.runNeeds(&r, ph, pi, cl, load, idOverride != "", vars)
	return r
}

// runKind is the kind of a run of load in phase ph, and whether it is
// measured.
func runKind(ph *Phase, load *Load) (string, bool) {
	kind := ph.Kind
	if ph.Kind == "primary" || ph.Kind == "steady-state" || ph.Kind == "stress" {
		kind = load.Kind
	}
	if load.Kind == "background" {
		kind = "background"
	}
	measured := loadKinds[load.Kind]
	if load.Measured != nil {
		measured = *load.Measured
	}
	if ph.Kind == "burn-in" || ph.Kind == "colocation" || kind == "background" {
		// the co-location check is reported apart from the matrix (A-P3-1)
		measured = false
	}
	return kind, measured
}

// choices are what a cell's axis values choose for a run.
type choices struct {
	class, server string
	serverArgs    []string
	expects       []ExpectSpec
	// expectFrom is each of expects as written, for its position.
	expectFrom []Expect
}

// cellChoices reads the class, GPUs and server that the axis values of cl
// give a run of load, after the load's own (the GPUs go into r).
func (b *builder) cellChoices(cl cell, load *Load, r *Run) choices {
	ch := choices{class: load.Class, server: load.Server}
	classFrom := ""
	for i, v := range cl.values {
		if v.Class != "" && load.Class == "" {
			if ch.class != "" && ch.class != v.Class {
				b.c.add(v.Meta.At("class"), "axes."+cl.axes[i]+"."+v.ID+".class", "cell %s gets class %q from %s and %q from %s", cl.display(), classFrom, classFrom, v.Class, v.ID)
			}
			ch.class, classFrom = v.Class, v.ID
		}
		if v.GPUs > r.GPUs {
			r.GPUs = v.GPUs
		}
		if v.Server != "" {
			ch.server = v.Server
		}
		ch.serverArgs = append(ch.serverArgs, v.ServerArgs...)
		for _, e := range v.Expect {
			ch.expects = append(ch.expects, expectSpec(e))
			ch.expectFrom = append(ch.expectFrom, e)
		}
	}
	return ch
}

// applyClass gives r its class (the only one when the protocol has one)
// with its drain allowance, watchdog and measuring deadline.
func (b *builder) applyClass(r *Run, load *Load, class string, vars map[string]string) {
	if class == "" && len(b.p.Classes) == 1 {
		class = b.p.Classes[0].Name
	}
	if cls := b.classes[class]; cls != nil {
		r.Class, r.DrainS, r.WatchdogS = class, cls.DrainAllowanceS, cls.WatchdogS
		vars["DRAIN_ALLOWANCE_S"] = formatSeconds(cls.DrainAllowanceS)
		vars["DRAIN_WATCHDOG_S"] = formatSeconds(cls.WatchdogS)
	}
	r.DeadlineS = load.DeadlineS
	if r.DeadlineS == 0 {
		r.DeadlineS = load.ExpectedS + r.WatchdogS
	} else if class == "" {
		b.c.add(load.Meta.Pos, "loads."+load.Name, "run %s has no class: give class on an axis value or on load %q", r.ID, load.Name)
	}
}

// serverSpec is server s as a run starts it, with the cell's extra
// arguments and expectations.
func (b *builder) serverSpec(s *Server, ch choices, vars map[string]string, needAs map[string]bool) ServerSpec {
	cmd := s.Command
	for _, a := range ch.serverArgs {
		cmd.Argv = append(cmd.Argv, a)
		cmd.ArgPos = append(cmd.ArgPos, cmd.Pos)
	}
	spec := ServerSpec{
		Name: s.Name, Kind: s.Kind, Command: b.command(cmd, "servers."+s.Name+".command", vars, needAs),
		Env: b.env(s.Env, s.Meta.At("env"), "servers."+s.Name+".env", vars, needAs), ReadyTimeoutS: s.ReadyTimeoutS,
		ShutdownGraceS: s.ShutdownGraceS, GroupGraceS: s.GroupGraceS, ConfigEndpoint: s.ConfigEndpoint,
	}
	if s.Health != nil {
		spec.HealthPath, spec.HealthStatus = s.Health.Path, s.Health.Status
	}
	for _, e := range s.Expect {
		spec.Expect = append(spec.Expect, expectSpec(e))
	}
	spec.Expect = append(spec.Expect, ch.expects...)
	b.checkConfigPaths(s, append(slices.Clone(s.Expect), ch.expectFrom...))
	return spec
}

// checkConfigPaths refuses an expectation with a path on a server that
// reports no configuration: its kind has no config endpoint
// (configEndpoints; SGLang-Omni's routes have none) and the protocol gives
// none. On a real server it could only error at every run; the effective
// configuration of such a server is checked by its launch arguments and
// by patterns on its startup log.
func (b *builder) checkConfigPaths(s *Server, es []Expect) {
	if s.ConfigEndpoint != "" {
		return
	}
	for _, e := range es {
		if e.Path == "" {
			continue
		}
		b.c.add(e.Meta.At("path"), "servers."+s.Name+".expect."+e.Name,
			"expectation %q reads path %q of the server's reported configuration, but a server of kind %s reports none (no config endpoint): check it by a pattern on the startup log, or give config_endpoint",
			e.Name, e.Path, s.Kind)
	}
}

// runNeeds gives r the runs load needs: a load of the same cell (same
// phase, same repeat), resolved later in a colocation phase (coloc), or a
// run id.
func (b *builder) runNeeds(r *Run, ph *Phase, pi int, cl cell, load *Load, coloc bool, vars map[string]string) {
	c := b.c
	for _, n := range load.Needs {
		var target string
		switch {
		case n.Load != "" && coloc:
			target = "" // resolved by the co-location expansion
		case n.Load != "":
			if !slices.Contains(ph.Loads, n.Load) {
				c.add(n.Pos, "loads."+load.Name+".needs", "load %q needs load %q of the same cell, but phase %q does not run %q", load.Name, n.Load, ph.Name, n.Load)
				continue
			}
			target = b.runID(ph, pi, cl, n.Load)
		default:
			t, errs := expand(n.Run, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, nil, false)
			for _, e := range errs {
				c.add(n.Pos, "loads."+load.Name+".needs", "%s", e.msg)
			}
			target = t
		}
		if target != "" {
			r.Needs = append(r.Needs, target)
			r.NeedVars["NEED_"+n.As+"_DIR"] = target
			b.needPos[r.ID] = append(b.needPos[r.ID], n.Pos)
		}
	}
}

// command expands plan-time variables in a command and checks that every
// variable left is a launch-time one this run will have.
func (b *builder) command(cmd Command, field string, vars map[string]string, needAs map[string]bool) CommandSpec {
	keep := func(n string) bool {
		if n == RateVar || strings.HasPrefix(n, "NEED_") && strings.HasSuffix(n, "_DIR") {
			return needAs[n]
		}
		return slices.Contains(LaunchVars, n)
	}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	one := func(s string, pos Pos, f string, shell bool) string {
		out, errs := expand(s, lookup, keep, true)
		for _, e := range errs {
			if shell && strings.Contains(e.msg, "is not expanded") {
				continue // a bare $NAME is the shell's to expand
			}
			msg := e.msg
			if strings.HasPrefix(msg, "unknown variable ${NEED_") {
				msg += " (this load does not need a run exported under that name)"
			}
			b.c.add(pos, f, "%s", msg)
		}
		return out
	}
	var spec CommandSpec
	if cmd.Shell != "" {
		spec.Shell = one(cmd.Shell, firstPos(cmd.ArgPos, cmd.Pos), field, true)
		return spec
	}
	for i, a := range cmd.Argv {
		spec.Argv = append(spec.Argv, one(a, firstPos(cmd.ArgPos[i:], cmd.Pos), fmt.Sprintf("%s[%d]", field, i), false))
	}
	return spec
}

func firstPos(ps []Pos, def Pos) Pos {
	if len(ps) > 0 {
		return ps[0]
	}
	return def
}

func (b *builder) env(env map[string]string, pos Pos, field string, vars map[string]string, needAs map[string]bool) map[string]string {
	if len(env) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		spec := b.command(Command{Argv: []string{env[k]}, ArgPos: []Pos{pos}}, field+"."+k, vars, needAs)
		out[k] = spec.Argv[0]
	}
	return out
}

func (b *builder) addRun(r Run, pos Pos) {
	if r.ID == "" {
		return
	}
	if old, dup := b.runPos[r.ID]; dup {
		b.c.add(pos, "", "two runs have the id %q (the first is defined at line %d); give the phase an id: template that tells them apart", r.ID, old.Line)
		return
	}
	b.runPos[r.ID] = pos
	b.runs = append(b.runs, r)
}

// cellFromRef resolves {axis: value, ...} to a cell.
func (b *builder) cellFromRef(ref map[string]string, pos Pos, field string) (cell, bool) {
	var cl cell
	ok := true
	for _, name := range slices.Sorted(maps.Keys(ref)) {
		if b.axes[name] == nil {
			b.c.add(pos, field+"."+name, "unknown axis %q (axes: %s)", name, strings.Join(slices.Sorted(maps.Keys(b.axes)), ", "))
			ok = false
		} else if b.values[name][ref[name]] == nil {
			b.c.add(pos, field+"."+name, "axis %q has no value %q", name, ref[name])
			ok = false
		}
	}
	for _, a := range b.p.Axes {
		if id, has := ref[a.Name]; has && b.values[a.Name][id] != nil {
			cl.axes = append(cl.axes, a.Name)
			cl.values = append(cl.values, b.values[a.Name][id])
		}
	}
	cl.repeat, cl.pos = 1, pos
	return cl, ok && len(cl.values) > 0
}

// coloc is one colocation phase being laid out.
type coloc struct {
	b       *builder
	ph      *Phase
	pi      int
	co      *Colocation
	f       string // the section's field, phases[i].colocation
	target  cell
	loads   []*Load // the target's loads
	bgLoad  *Load
	compare string // the load whose throughput the gate compares
}

// expandColocation lays out a co-location check: the target's loads solo,
// then for each gated regime in turn the same loads beside background
// loads, each later regime only if the one before failed its gate.
func (b *builder) expandColocation(ph *Phase, pi int) int {
	x, ok := b.colocation(ph, pi)
	if !ok {
		return 0
	}
	x.group("solo", "solo", "", nil)
	cond := ""
	cells := 1
	for i := range x.co.Checks {
		gate, n, ok := x.check(i, cond)
		if !ok {
			continue
		}
		cond = "gate " + gate + " failed"
		cells += n
	}
	return cells
}

// colocation checks a colocation section; it is false when the phase
// cannot be laid out.
func (b *builder) colocation(ph *Phase, pi int) (*coloc, bool) {
	co := ph.Colocation
	x := &coloc{b: b, ph: ph, pi: pi, co: co, f: fmt.Sprintf("phases[%d].colocation", pi)}
	f, c := x.f, b.c
	target, ok := b.cellFromRef(co.Target, co.Meta.At("target"), f+".target")
	x.target = target
	if b.slots[co.Slot] == nil && co.Slot != "" {
		unknown(c, b.slots, co.Slot, co.Meta.At("slot"), f+".slot", "slot", "slots")
		ok = false
	}
	for j, l := range co.Loads {
		if b.loads[l] == nil {
			unknown(c, b.loads, l, co.Meta.At("loads"), fmt.Sprintf("%s.loads[%d]", f, j), "load", "loads")
			ok = false
			continue
		}
		x.loads = append(x.loads, b.loads[l])
	}
	x.bgLoad = b.loads[co.BackgroundLoad]
	if x.bgLoad == nil && co.BackgroundLoad != "" {
		unknown(c, b.loads, co.BackgroundLoad, co.Meta.At("background_load"), f+".background_load", "load", "loads")
		ok = false
	}
	x.compare = co.Gate.Compare
	if x.compare == "" && len(co.Loads) > 0 {
		x.compare = co.Loads[len(co.Loads)-1]
	} else if x.compare != "" && !slices.Contains(co.Loads, x.compare) {
		c.add(co.Gate.Meta.At("compare"), f+".gate.compare", "load %q is not one of the target's loads", x.compare)
	}
	x.checkGate()
	return x, ok && x.bgLoad != nil
}

func (x *coloc) checkGate() {
	g, f, c := &x.co.Gate, x.f, x.b.c
	if g.ThroughputTolerance <= 0 || g.ThroughputTolerance >= 1 {
		if _, given := g.Meta.Fields["throughput_tolerance"]; given {
			c.add(g.Meta.At("throughput_tolerance"), f+".gate.throughput_tolerance", "a tolerance is a fraction above 0 and below 1, got %v", g.ThroughputTolerance)
		}
	}
	if g.ProfileWindows < 0 {
		c.add(g.Meta.At("profile_windows"), f+".gate.profile_windows", "a number of profile windows cannot be negative, got %d", g.ProfileWindows)
	}
	if g.Validator != nil && g.FigureTolerance <= 0 {
		c.add(g.Meta.Pos, f+".gate.figure_tolerance", "a validator's figures need a positive figure_tolerance")
	}
}

// group adds the target's runs of one regime as a unit; same-cell needs
// resolve to the run of that load in the group. It returns their ids.
func (x *coloc) group(prefix, regime, cond string, bgs []string) []string {
	b := x.b
	b.units++
	var ids []string
	byLoad := map[string]string{}
	for _, l := range x.loads {
		id := fmt.Sprintf("coloc.%s.%s.%s", prefix, x.target.id(), l.Name)
		r := b.makeRun(x.ph, x.pi, x.target, l, id)
		r.Slot, r.Regime, r.Condition, r.Unit, r.Backgrounds = x.co.Slot, regime, cond, b.units, bgs
		for _, n := range l.Needs {
			if n.Load == "" {
				continue
			}
			dep, has := byLoad[n.Load]
			if !has {
				b.c.add(n.Pos, "loads."+l.Name+".needs", "load %q needs load %q, which the co-location check does not run before it", l.Name, n.Load)
				continue
			}
			r.Needs = append(r.Needs, dep)
			r.NeedVars["NEED_"+n.As+"_DIR"] = dep
		}
		byLoad[l.Name] = id
		b.addRun(r, x.co.Meta.At("loads"))
		ids = append(ids, id)
	}
	return ids
}

// check lays out check i, run when cond holds: its backgrounds, the
// target beside them and the gate between them. It returns the gate's
// name and the number of background cells; false when the check names no
// regime.
func (x *coloc) check(i int, cond string) (string, int, bool) {
	b, c, co := x.b, x.b.c, x.co
	chk := &co.Checks[i]
	cf := fmt.Sprintf("%s.checks[%d]", x.f, i)
	reg := b.regimes[chk.Regime]
	if reg == nil {
		c.add(chk.Meta.At("regime"), cf+".regime", "unknown regime %q (regimes: %s)", chk.Regime, strings.Join(b.regimeNames(), ", "))
		return "", 0, false
	}
	if !reg.Gated {
		c.add(chk.Meta.At("regime"), cf+".regime", "regime %q is not gated; mark it gated: true or drop this check", chk.Regime)
	}
	if len(chk.Backgrounds)+1 > reg.Concurrency {
		c.add(chk.Meta.At("backgrounds"), cf+".backgrounds", "%d backgrounds and the target exceed regime %q's concurrency of %d", len(chk.Backgrounds), chk.Regime, reg.Concurrency)
	}
	bgIDs, bgRuns := x.backgrounds(chk, cf, cond)
	b.units++
	unit := b.units
	targets := x.group(chk.Regime, chk.Regime, cond, bgIDs)
	x.insertBackgrounds(bgRuns, targets, unit, chk.Meta.At("backgrounds"))
	gate := GateInfo{
		Name: "colocation/" + chk.Regime, Kind: "colocation", Regime: chk.Regime,
		Solo:           fmt.Sprintf("coloc.solo.%s.%s", x.target.id(), x.compare),
		Target:         fmt.Sprintf("coloc.%s.%s.%s", chk.Regime, x.target.id(), x.compare),
		ThroughputFile: co.Gate.ThroughputFile, ThroughputField: co.Gate.ThroughputField,
		ThroughputTolerance: co.Gate.ThroughputTolerance, FigureTolerance: co.Gate.FigureTolerance, Condition: cond,
		ProfileWindows: co.Gate.ProfileWindows,
	}
	if co.Gate.Validator != nil {
		v := b.command(*co.Gate.Validator, x.f+".gate.validator", b.cellVars(x.ph, x.target), map[string]bool{"NEED_SOLO_DIR": true, "NEED_TARGET_DIR": true})
		gate.Validator = &v
	}
	b.gates = append(b.gates, gate)
	return gate.Name, len(bgRuns), true
}

// backgrounds makes the background runs of chk, each on a slot of its
// own.
func (x *coloc) backgrounds(chk *ColocCheck, cf, cond string) ([]string, []Run) {
	b, c := x.b, x.b.c
	used := map[string]bool{x.co.Slot: true}
	var bgIDs []string
	var bgRuns []Run
	for j, bg := range chk.Backgrounds {
		bf := fmt.Sprintf("%s.backgrounds[%d]", cf, j)
		bc, ok := b.cellFromRef(bg.Cell, bg.Meta.At("cell"), bf+".cell")
		if b.slots[bg.Slot] == nil {
			unknown(c, b.slots, bg.Slot, bg.Meta.At("slot"), bf+".slot", "slot", "slots")
			continue
		}
		if used[bg.Slot] {
			c.add(bg.Meta.At("slot"), bf+".slot", "slot %q is already used by this check", bg.Slot)
			continue
		}
		used[bg.Slot] = true
		if !ok {
			continue
		}
		id := fmt.Sprintf("coloc.%s.bg.%s", chk.Regime, bc.id())
		r := b.makeRun(x.ph, x.pi, bc, x.bgLoad, id)
		r.Slot, r.Regime, r.Condition = bg.Slot, chk.Regime, cond
		bgIDs = append(bgIDs, id)
		bgRuns = append(bgRuns, r)
	}
	return bgIDs, bgRuns
}

// insertBackgrounds adds the background runs of a check just before its
// targets (the runs last added): backgrounds are launched before the
// target and stopped after it, so each lasts the targets' whole span.
func (x *coloc) insertBackgrounds(bgRuns []Run, targets []string, unit int, pos Pos) {
	b := x.b
	var span float64
	for _, t := range targets {
		if r, ok := b.find(t); ok {
			span += r.ExpectedS
		}
	}
	at := len(b.runs) - len(targets)
	for k := range bgRuns {
		bgRuns[k].Until = targets
		bgRuns[k].ExpectedS += span
		bgRuns[k].Unit = unit
	}
	rest := append([]Run(nil), b.runs[at:]...)
	b.runs = b.runs[:at]
	for _, r := range bgRuns {
		b.addRun(r, pos)
	}
	b.runs = append(b.runs, rest...)
}

func (b *builder) find(id string) (Run, bool) {
	for _, r := range b.runs {
		if r.ID == id {
			return r, true
		}
	}
	return Run{}, false
}

// resolveNeeds checks that every need names a run, that no need is
// scheduled after the run that needs it, and that needs form no cycle.
func (b *builder) resolveNeeds() {
	index := map[string]int{}
	for i, r := range b.runs {
		index[r.ID] = i
	}
	for i, r := range b.runs {
		for k, n := range r.Needs {
			pos := r.needPos(b, k)
			j, ok := index[n]
			switch {
			case !ok:
				b.c.add(pos, "needs", "run %s needs run %q, which the protocol does not define", r.ID, n)
			case j == i:
				b.c.add(pos, "needs", "run %s needs itself", r.ID)
			}
		}
	}
	// cycles: depth-first search over the need graph
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(b.runs))
	var stack []string
	reported := false
	var visit func(i int)
	visit = func(i int) {
		color[i] = grey
		stack = append(stack, b.runs[i].ID)
		for k, n := range b.runs[i].Needs {
			j, ok := index[n]
			if !ok || j == i {
				continue
			}
			switch color[j] {
			case white:
				visit(j)
			case grey:
				if !reported {
					start := 0
					for s, id := range stack {
						if id == n {
							start = s
						}
					}
					cyc := append(append([]string(nil), stack[start:]...), n)
					b.c.add(b.runs[i].needPos(b, k), "needs", "dependency cycle: %s", strings.Join(cyc, " -> "))
					reported = true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
	}
	for i := range b.runs {
		if color[i] == white {
			visit(i)
		}
	}
	if reported {
		return
	}
	for i, r := range b.runs {
		for k, n := range r.Needs {
			if j, ok := index[n]; ok && j > i {
				b.c.add(r.needPos(b, k), "needs", "run %s needs run %s, which is scheduled after it; order the phases or loads so the needed run comes first", r.ID, n)
			}
		}
	}
}

func (r Run) needPos(b *builder, k int) Pos {
	ps := b.needPos[r.ID]
	if k < len(ps) {
		return ps[k]
	}
	return b.runPos[r.ID]
}

func (b *builder) regimeInfo(plan *Plan) {
	for _, r := range b.p.Regimes {
		info := RegimeInfo{Name: r.Name, Concurrency: r.Concurrency, Slots: r.Slots}
		if len(info.Slots) == 0 {
			for i := 0; i < r.Concurrency && i < len(b.p.Slots); i++ {
				info.Slots = append(info.Slots, b.p.Slots[i].Name)
			}
		}
		if r.Gated {
			info.Gate = "colocation/" + r.Name
		}
		plan.Regimes = append(plan.Regimes, info)
	}
	plan.Regime = b.opts.Regime
	if plan.Regime == "" && len(plan.Regimes) > 0 {
		plan.Regime = plan.Regimes[0].Name
	}
}

// checkGatedRegimes reports a gated regime that no co-location check
// validates: it could never be used.
func (b *builder) checkGatedRegimes() {
	for _, r := range b.p.Regimes {
		if !r.Gated {
			continue
		}
		found := false
		for _, g := range b.gates {
			found = found || g.Regime == r.Name
		}
		if !found {
			b.c.add(r.Meta.At("gated"), "regimes."+r.Name, "regime %q is gated but no co-location check validates it", r.Name)
		}
	}
}

func (b *builder) phase(name string) *Phase {
	for i := range b.p.Phases {
		if b.p.Phases[i].Name == name {
			return &b.p.Phases[i]
		}
	}
	return nil
}
