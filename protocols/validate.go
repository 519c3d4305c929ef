package protocols

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// validate checks the protocol section by section, in the order of the
// sections' dependencies (regimes name slots, loads name servers and
// classes, axes and phases name all of them), and fills in defaults.
func (b *builder) validate() {
	b.validateHeader()
	b.validateHost()
	b.validateBudget()
	b.validateVars()
	b.validateSlots()
	b.validateExecutor()
	for i := range b.p.Regimes {
		b.validateRegime(i, &b.p.Regimes[i])
	}
	if b.opts.Regime != "" && b.regimes[b.opts.Regime] == nil {
		b.c.add(Pos{}, "regime", "the protocol has no regime %q (it has: %s)", b.opts.Regime, strings.Join(b.regimeNames(), ", "))
	}
	each(b.p.Classes, "classes", b.validateClass)
	each(b.p.Servers, "servers", b.validateServer)
	b.validateLoads()
	each(b.p.Axes, "axes", b.validateAxis)
	b.validatePhases()
	b.validateStop()
	b.validateValidators()
	b.validatePowerCheck()
	b.validateProvenance()
}

// each calls check on every entry of a section, naming it section[i].
func each[T any](list []T, section string, check func(f string, v *T)) {
	for i := range list {
		check(fmt.Sprintf("%s[%d]", section, i), &list[i])
	}
}

// define checks the name of the section entry f (what says what it
// names: "regime", "slot") and records v under it in seen. It is false
// when the name is missing, not a safe ID or defined before; all but the
// missing name are reported.
func define[T any](c *collector, seen map[string]T, v T, m Meta, f, what, name string) bool {
	if !checkID(c, m.At("name"), f+".name", what+" name", name) {
		return false
	}
	if _, dup := seen[name]; dup {
		c.add(m.At("name"), f+".name", "%s %q is defined twice", what, name)
		return false
	}
	seen[name] = v
	return true
}

// unknown reports a reference to a name that seen does not define.
func unknown[T any](c *collector, seen map[string]T, name string, pos Pos, f, what, plural string) {
	if !has(seen, name) {
		c.add(pos, f, "unknown %s %q (%s: %s)", what, name, plural, strings.Join(slices.Sorted(maps.Keys(seen)), ", "))
	}
}

func has[T any](m map[string]T, k string) bool {
	_, ok := m[k]
	return ok
}

func (b *builder) validateHeader() {
	p, c := b.p, b.c
	if _, ok := p.Meta.Fields["warden"]; ok && p.Warden != FormatVersion {
		c.add(p.Meta.At("warden"), "warden", "protocol format %d is not supported; this controller reads format %d", p.Warden, FormatVersion)
	}
	checkID(c, p.Meta.At("name"), "name", "protocol name", p.Name)
	if m := p.Privacy.MinLeakBytes; m != nil && *m < MinLeakBytesFloor {
		c.add(p.Privacy.Meta.At("min_leak_bytes"), "privacy.min_leak_bytes", "must be at least %d bytes (shorter runs of a prompt turn up by chance), got %d", MinLeakBytesFloor, *m)
	}
}

func (b *builder) validateHost() {
	h, c := &b.p.Host, b.c
	if _, ok := h.Meta.Fields["gpus"]; ok && h.GPUs < 1 {
		c.add(h.Meta.At("gpus"), "host.gpus", "host must have at least one GPU, got %d", h.GPUs)
	}
	if _, ok := h.Meta.Fields["cpus"]; ok && h.CPUs < 1 {
		c.add(h.Meta.At("cpus"), "host.cpus", "host must have at least one CPU, got %d", h.CPUs)
	}
	if h.NUMANodes == 0 {
		h.NUMANodes = 1
	} else if h.NUMANodes < 0 {
		c.add(h.Meta.At("numa_nodes"), "host.numa_nodes", "must be at least 1, got %d", h.NUMANodes)
	}
}

func (b *builder) validateBudget() {
	bu, c := &b.p.Budget, b.c
	if _, ok := bu.Meta.Fields["cap_gpu_hours"]; ok && bu.CapGPUHours <= 0 {
		c.add(bu.Meta.At("cap_gpu_hours"), "budget.cap_gpu_hours", "the GPU-hour cap must be positive, got %v", bu.CapGPUHours)
	}
	if bu.ConsumedGPUHours < 0 {
		c.add(bu.Meta.At("consumed_gpu_hours"), "budget.consumed_gpu_hours", "GPU-hours already consumed cannot be negative, got %v", bu.ConsumedGPUHours)
	} else if bu.CapGPUHours > 0 && bu.ConsumedGPUHours >= bu.CapGPUHours {
		c.add(bu.Meta.At("consumed_gpu_hours"), "budget.consumed_gpu_hours", "%v GPU-hours already consumed leaves nothing under the cap of %v", bu.ConsumedGPUHours, bu.CapGPUHours)
	}
	oneOf(c, &bu.Reserve, "bounds", bu.Meta, "budget.reserve", "reserve", "nominal", "bounds")
}

// oneOf defaults an empty *v to def and reports a value that is neither
// of a and b, naming the field key in the message.
func oneOf(c *collector, v *string, def string, m Meta, f, key, a, b string) {
	switch *v {
	case "":
		*v = def
	case a, b:
	default:
		c.add(m.At(key), f, "%s is %s or %s, got %q", key, a, b, *v)
	}
}

func (b *builder) validateVars() {
	p, c := b.p, b.c
	for _, name := range slices.Sorted(maps.Keys(p.Vars)) {
		pos := p.Meta.At("vars")
		switch {
		case !varName.MatchString(name):
			c.add(pos, "vars."+name, "variable name %q must be upper case letters, digits and _", name)
		case isBuiltin(name):
			c.add(pos, "vars."+name, "variable %s is built in and cannot be redefined", name)
		case strings.Contains(p.Vars[name], "${"):
			c.add(pos, "vars."+name, "protocol vars are literal text and cannot use other variables")
		}
	}
}

func (b *builder) validateRegime(i int, r *Regime) {
	p, c := b.p, b.c
	f := fmt.Sprintf("regimes[%d]", i)
	if !define(c, b.regimes, r, r.Meta, f, "regime", r.Name) {
		return
	}
	b.regimeI[r.Name] = i
	if r.Concurrency < 1 {
		c.add(r.Meta.At("concurrency"), f+".concurrency", "concurrency must be at least 1, got %d", r.Concurrency)
	} else if r.Concurrency > len(p.Slots) && len(p.Slots) > 0 {
		c.add(r.Meta.At("concurrency"), f+".concurrency", "concurrency %d needs %d slots; the protocol declares %d", r.Concurrency, r.Concurrency, len(p.Slots))
	}
	if len(r.Slots) > 0 && len(r.Slots) != r.Concurrency {
		c.add(r.Meta.At("slots"), f+".slots", "lists %d slots for a concurrency of %d", len(r.Slots), r.Concurrency)
	}
	for j, s := range r.Slots {
		unknown(c, b.slots, s, r.Meta.At("slots"), fmt.Sprintf("%s.slots[%d]", f, j), "slot", "slots")
	}
}

func (b *builder) validateClass(f string, cl *Class) {
	c := b.c
	if !define(c, b.classes, cl, cl.Meta, f, "class", cl.Name) {
		return
	}
	if _, ok := cl.Meta.Fields["drain_allowance_s"]; ok && cl.DrainAllowanceS <= 0 {
		c.add(cl.Meta.At("drain_allowance_s"), f+".drain_allowance_s", "drain allowance must be positive, got %v", cl.DrainAllowanceS)
	}
	if _, ok := cl.Meta.Fields["watchdog_s"]; ok && cl.WatchdogS < cl.DrainAllowanceS {
		c.add(cl.Meta.At("watchdog_s"), f+".watchdog_s", "the hard watchdog (%v s) must not be shorter than the drain allowance (%v s)", cl.WatchdogS, cl.DrainAllowanceS)
	}
}

func (b *builder) validateServer(f string, s *Server) {
	c := b.c
	if !define(c, b.servers, s, s.Meta, f, "server", s.Name) {
		return
	}
	b.validateHealth(f, s)
	defaultPositive(c, &s.ReadyTimeoutS, 900, s.Meta, f, "ready_timeout_s")
	defaultPositive(c, &s.ShutdownGraceS, 60, s.Meta, f, "shutdown_grace_s")
	defaultPositive(c, &s.GroupGraceS, 10, s.Meta, f, "group_grace_s")
	if s.ConfigEndpoint == "" {
		s.ConfigEndpoint = configEndpoints[s.Kind]
	} else if !strings.HasPrefix(s.ConfigEndpoint, "/") {
		c.add(s.Meta.At("config_endpoint"), f+".config_endpoint", "the config endpoint is a path starting with /, got %q", s.ConfigEndpoint)
	}
	b.checkExpects(s.Expect, f+".expect")
	b.checkEnvNames(s.Env, s.Meta.At("env"), f+".env")
	for k, v := range kindEnv[s.Kind] {
		if _, set := s.Env[k]; !set {
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[k] = v
		}
	}
}

// validateHealth checks a server's kind and its health probe, giving it
// its kind's probe when it names none.
func (b *builder) validateHealth(f string, s *Server) {
	c := b.c
	def, known := serverKinds[s.Kind]
	switch {
	case s.Kind == "":
	case !known:
		c.add(s.Meta.At("kind"), f+".kind", "unknown server kind %q (known: %s)", s.Kind, strings.Join(slices.Sorted(maps.Keys(serverKinds)), ", "))
	case s.Health == nil && def.Path == "":
		c.add(s.Meta.Pos, f+".health", "a %s server needs a health probe: health: {path: /health, status: 200}", s.Kind)
	case s.Health == nil:
		h := def
		s.Health = &h
	}
	if s.Health == nil {
		return
	}
	if s.Health.Status == 0 {
		s.Health.Status = 200
	}
	if !strings.HasPrefix(s.Health.Path, "/") && s.Health.Path != "" {
		c.add(s.Health.Meta.At("path"), f+".health.path", "the probe path must start with /, got %q", s.Health.Path)
	}
	if s.Health.Status < 100 || s.Health.Status > 599 {
		c.add(s.Health.Meta.At("status"), f+".health.status", "%d is not an HTTP status", s.Health.Status)
	}
}

func (b *builder) validateLoads() {
	each(b.p.Loads, "loads", b.validateLoad)
	for i := range b.p.Loads { // after all loads are known
		l := &b.p.Loads[i]
		for j, n := range l.Needs {
			if n.Load != "" && b.loads[n.Load] == nil {
				b.c.add(n.Pos, fmt.Sprintf("loads[%d].needs[%d]", i, j), "needs load %q, which is not defined", n.Load)
			}
		}
	}
}

func (b *builder) validateLoad(f string, l *Load) {
	c := b.c
	if !define(c, b.loads, l, l.Meta, f, "load", l.Name) {
		return
	}
	if _, ok := loadKinds[l.Kind]; !ok && l.Kind != "" {
		c.add(l.Meta.At("kind"), f+".kind", "unknown load kind %q (known: %s)", l.Kind, strings.Join(slices.Sorted(maps.Keys(loadKinds)), ", "))
	}

	if l.Server != "" {
		unknown(c, b.servers, l.Server, l.Meta.At("server"), f+".server", "server", "servers")
	}

	if l.Class != "" {
		unknown(c, b.classes, l.Class, l.Meta.At("class"), f+".class", "class", "classes")
	}
	if _, ok := l.Meta.Fields["expected_s"]; ok && l.ExpectedS <= 0 {
		c.add(l.Meta.At("expected_s"), f+".expected_s", "expected duration must be positive, got %v", l.ExpectedS)
	}
	if _, ok := l.Meta.Fields["deadline_s"]; ok && l.DeadlineS <= 0 {
		c.add(l.Meta.At("deadline_s"), f+".deadline_s", "the measuring deadline must be positive, got %v", l.DeadlineS)
	}
	if _, ok := l.Meta.Fields["ready_timeout_s"]; ok && l.ReadyTimeoutS <= 0 {
		c.add(l.Meta.At("ready_timeout_s"), f+".ready_timeout_s", "a ready timeout must be positive, got %v", l.ReadyTimeoutS)
	}
	oneOf(c, &l.AdmissionEnd, "phase-file", l.Meta, f+".admission_end", "admission_end", "phase-file", "result-file")
	if l.ResultFile == "" {
		l.ResultFile = "client/result.json"
	} else if filepath.IsAbs(l.ResultFile) || strings.HasPrefix(filepath.Clean(l.ResultFile), "..") {
		c.add(l.Meta.At("result_file"), f+".result_file", "result_file is relative to the attempt directory and stays inside it, got %q", l.ResultFile)
	}
	oneOf(c, &l.ClientStart, "after-ready", l.Meta, f+".client_start", "client_start", "after-ready", "at-start")
	b.checkEnvNames(l.Env, l.Meta.At("env"), f+".env")
	for j, n := range l.Needs {
		nf := fmt.Sprintf("%s.needs[%d]", f, j)
		if !varName.MatchString(n.As) {
			c.add(n.Pos, nf, "need alias %q must be upper case letters, digits and _ (it names ${NEED_%s_DIR})", n.As, n.As)
		}
		for k := range j {
			if l.Needs[k].As == n.As {
				c.add(n.Pos, nf, "two needs are both exported as NEED_%s_DIR", n.As)
			}
		}
	}
}

func (b *builder) validateAxis(f string, a *Axis) {
	p, c := b.p, b.c
	if a.Name == "" {
		return
	}
	if !axisName.MatchString(a.Name) {
		c.add(a.Meta.At("name"), f+".name", "axis name %q must be lower case letters, digits and _", a.Name)
		return
	}
	if _, dup := b.axes[a.Name]; dup {
		c.add(a.Meta.At("name"), f+".name", "axis %q is defined twice", a.Name)
		return
	}
	up := strings.ToUpper(a.Name)
	if isBuiltin(up) {
		c.add(a.Meta.At("name"), f+".name", "axis %q would shadow the built-in variable ${%s}", a.Name, up)
	}
	if _, clash := p.Vars[up]; clash {
		c.add(a.Meta.At("name"), f+".name", "axis %q clashes with the protocol variable %s", a.Name, up)
	}
	b.axes[a.Name] = a
	b.values[a.Name] = map[string]*AxisValue{}
	if _, ok := a.Meta.Fields["values"]; ok && len(a.Values) == 0 {
		c.add(a.Meta.At("values"), f+".values", "axis %q has no values", a.Name)
	}
	each(a.Values, f+".values", func(vf string, v *AxisValue) { b.validateAxisValue(a.Name, vf, v) })
}

func (b *builder) validateAxisValue(axis, vf string, v *AxisValue) {
	c, h := b.c, &b.p.Host
	if !checkID(c, v.Meta.At("id"), vf+".id", "axis value", v.ID) {
		return
	}
	if _, dup := b.values[axis][v.ID]; dup {
		c.add(v.Meta.At("id"), vf+".id", "value %q appears twice on axis %q", v.ID, axis)
		return
	}
	b.values[axis][v.ID] = v

	if v.Class != "" {
		unknown(c, b.classes, v.Class, v.Meta.At("class"), vf+".class", "class", "classes")
	}

	if v.Server != "" {
		unknown(c, b.servers, v.Server, v.Meta.At("server"), vf+".server", "server", "servers")
	}
	if v.GPUs < 0 {
		c.add(v.Meta.At("gpus"), vf+".gpus", "GPU count cannot be negative, got %d", v.GPUs)
	} else if v.GPUs > h.GPUs && h.GPUs > 0 {
		c.add(v.Meta.At("gpus"), vf+".gpus", "needs %d GPUs; the host has %d", v.GPUs, h.GPUs)
	}
	for _, name := range slices.Sorted(maps.Keys(v.Vars)) {
		switch {
		case !varName.MatchString(name):
			c.add(v.Meta.At("vars"), vf+".vars."+name, "variable name %q must be upper case letters, digits and _", name)
		case isBuiltin(name):
			c.add(v.Meta.At("vars"), vf+".vars."+name, "variable %s is built in and cannot be redefined", name)
		}
	}
	b.checkExpects(v.Expect, vf+".expect")
}

func (b *builder) validatePhases() {
	p := b.p
	names := map[string]bool{}
	each(p.Phases, "phases", func(f string, ph *Phase) {
		define(b.c, names, true, ph.Meta, f, "phase", ph.Name) // a second definition is checked all the same
		b.validatePhase(f, ph)
	})
	if _, ok := p.Meta.Fields["phases"]; ok && len(p.Phases) == 0 {
		b.c.add(p.Meta.At("phases"), "phases", "the protocol has no phases, so no runs")
	}
}

func (b *builder) validatePhase(f string, ph *Phase) {
	c := b.c
	if ph.Kind != "" && !phaseKinds[ph.Kind] {
		c.add(ph.Meta.At("kind"), f+".kind", "unknown phase kind %q (known: %s)", ph.Kind, strings.Join(slices.Sorted(maps.Keys(phaseKinds)), ", "))
	}
	if ph.Regime != "" && b.regimes[ph.Regime] == nil {
		c.add(ph.Meta.At("regime"), f+".regime", "unknown regime %q (regimes: %s)", ph.Regime, strings.Join(b.regimeNames(), ", "))
	}
	if ph.Repeats < 0 {
		c.add(ph.Meta.At("repeats"), f+".repeats", "repeats must be at least 1, got %d", ph.Repeats)
	}
	if ph.Repeats == 0 {
		ph.Repeats = 1
	}
	if ph.Prior != nil && ph.Kind != "colocation" {
		c.add(ph.Meta.At("prior"), f+".prior", "only a phase of kind colocation takes a prior verdict")
	}
	if pr := ph.Prior; pr != nil && strings.Contains(pr.Verdict, "${") {
		c.add(pr.Meta.At("verdict"), f+".prior.verdict", "a prior verdict's path is literal; variables are not expanded here")
	}
	if ph.Kind == "colocation" {
		if ph.Colocation == nil {
			c.add(ph.Meta.Pos, f+".colocation", "a colocation phase needs a colocation: section")
		}
		if ph.Matrix != nil {
			c.add(ph.Meta.At("matrix"), f+".matrix", "a colocation phase takes its cells from colocation:, not a matrix")
		}
		return
	}
	if ph.Colocation != nil {
		c.add(ph.Meta.At("colocation"), f+".colocation", "only a phase of kind colocation has a colocation: section")
	}
	if ph.Matrix == nil && ph.Kind != "" {
		c.add(ph.Meta.Pos, f+".matrix", "phase %q needs a matrix", ph.Name)
	}
	if _, ok := ph.Meta.Fields["loads"]; !ok {
		c.add(ph.Meta.Pos, f+".loads", "phase %q needs loads: the load points each cell runs", ph.Name)
	} else if len(ph.Loads) == 0 {
		c.add(ph.Meta.At("loads"), f+".loads", "phase %q lists no loads", ph.Name)
	}
	b.checkLoadNames(ph.Loads, ph.Meta.At("loads"), f)
	b.checkOrder(ph, f)
	b.validateCapacity(f, ph)
}

// validateCapacity checks a capacity phase's search and fills in its
// defaults: one load whose client reads ${CAPACITY_RATE}, rate_min < rate_max, a
// resolution narrower than that interval, and an SLO with a bound.
func (b *builder) validateCapacity(f string, ph *Phase) {
	c, cp := b.c, ph.Capacity
	if ph.Kind != "capacity" {
		if cp != nil {
			c.add(ph.Meta.At("capacity"), f+".capacity", "only a phase of kind capacity has a capacity: section")
		}
		return
	}
	if cp == nil {
		c.add(ph.Meta.Pos, f+".capacity", "a capacity phase needs a capacity: section (rate_min, rate_max, resolution, slo)")
		return
	}
	if len(ph.Loads) > 1 {
		c.add(ph.Meta.At("loads"), f+".loads", "a capacity phase searches one load, got %d", len(ph.Loads))
	}
	if ph.Repeats > 1 {
		c.add(ph.Meta.At("repeats"), f+".repeats", "a capacity phase's repeats are its follow-up points; repeats must be 1, got %d", ph.Repeats)
	}
	cf, m := f+".capacity", cp.Meta
	if _, ok := m.Fields["rate_min"]; ok && cp.RateMin <= 0 {
		c.add(m.At("rate_min"), cf+".rate_min", "must be positive, got %v", cp.RateMin)
	}
	if _, ok := m.Fields["rate_max"]; ok && cp.RateMax <= cp.RateMin {
		c.add(m.At("rate_max"), cf+".rate_max", "must be above rate_min (%v), got %v", cp.RateMin, cp.RateMax)
	}
	if _, ok := m.Fields["resolution"]; ok && (cp.Resolution <= 0 || (cp.RateMax > cp.RateMin && cp.Resolution >= cp.RateMax-cp.RateMin)) {
		c.add(m.At("resolution"), cf+".resolution", "must be positive and narrower than rate_max - rate_min (%v), got %v", cp.RateMax-cp.RateMin, cp.Resolution)
	}
	if _, ok := m.Fields["follow_ups"]; !ok {
		cp.FollowUps = append([]float64(nil), DefaultFollowUps...)
	}
	for i, fr := range cp.FollowUps {
		if fr <= 0 || fr >= 1 || (i > 0 && fr <= cp.FollowUps[i-1]) {
			c.add(m.At("follow_ups"), fmt.Sprintf("%s.follow_ups[%d]", cf, i), "follow-ups are ascending fractions of the found rate, above 0 and below 1, got %v", fr)
		}
	}
	if _, ok := m.Fields["overload"]; !ok {
		cp.Overload = DefaultOverload
	} else if cp.Overload <= 1 {
		c.add(m.At("overload"), cf+".overload", "the overload point is a multiple of the found rate above 1, got %v", cp.Overload)
	}
	if _, ok := m.Fields["slo"]; ok {
		b.validateSLO(cf+".slo", &cp.SLO)
	}
	oneOf(c, &cp.OnNonMonotonic, "stop", m, cf+".on_non_monotonic", "on_non_monotonic", "stop", "continue")
	for _, l := range ph.Loads {
		ld := b.loads[l]
		if ld == nil {
			continue
		}
		if !commandUses(ld.Client, RateVar) {
			c.add(ph.Meta.At("loads"), f+".loads", "load %q is searched over its arrival rate, so its client must use ${%s}", l, RateVar)
		}
		if slices.ContainsFunc(ld.Needs, func(n Need) bool { return n.Load != "" }) {
			c.add(ph.Meta.At("loads"), f+".loads", "load %q needs a load of its cell, which a capacity phase does not run", l)
		}
	}
}

// validateSLO checks a capacity search's SLO: at least one bound, a success
// fraction in (0, 1], the other bounds positive.
func (b *builder) validateSLO(f string, s *SLO) {
	bounds := []struct {
		v    *float64
		name string
	}{{s.SuccessMin, "success_min"}, {s.TTFTP99MsMax, "ttft_p99_ms_max"}, {s.E2EP99MsMax, "e2e_p99_ms_max"},
		{s.TTFAP99MsMax, "ttfa_p99_ms_max"}, {s.ChunkGapP99MsMax, "chunk_gap_p99_ms_max"}, {s.RTFP99LT, "rtf_p99_lt"}, {s.QueueGrowthMax, "queue_growth_max"}}
	given := 0
	for _, bd := range bounds {
		switch {
		case bd.v == nil:
			continue
		case bd.name == "success_min" && (*bd.v <= 0 || *bd.v > 1):
			b.c.add(s.Meta.At(bd.name), f+"."+bd.name, "a fraction of requests is above 0 and at most 1, got %v", *bd.v)
		case bd.name != "success_min" && *bd.v <= 0:
			b.c.add(s.Meta.At(bd.name), f+"."+bd.name, "must be positive, got %v", *bd.v)
		}
		given++
	}
	if given == 0 {
		b.c.add(s.Meta.Pos, f, "the SLO names no bound (success_min, ttft_p99_ms_max, e2e_p99_ms_max, ttfa_p99_ms_max, chunk_gap_p99_ms_max, rtf_p99_lt, queue_growth_max)")
	}
}

// commandUses says whether cmd's text names ${name}.
func commandUses(cmd Command, name string) bool {
	ref := "${" + name + "}"
	if strings.Contains(cmd.Shell, ref) {
		return true
	}
	return slices.ContainsFunc(cmd.Argv, func(a string) bool { return strings.Contains(a, ref) })
}

// checkLoadNames reports the names in loads (the list at f.loads) that
// name no load.
func (b *builder) checkLoadNames(loads []string, pos Pos, f string) {
	for j, l := range loads {
		unknown(b.c, b.loads, l, pos, fmt.Sprintf("%s.loads[%d]", f, j), "load", "loads")
	}
}

func (b *builder) validateStop() {
	p, c := b.p, b.c
	for _, fr := range []struct {
		v    *float64
		name string
	}{{p.Stop.QuarantinedFractionGT, "quarantined_fraction_gt"}, {p.Stop.FailedFractionGT, "failed_fraction_gt"}} {
		if fr.v != nil && (*fr.v < 0 || *fr.v >= 1) {
			c.add(p.Stop.Meta.At(fr.name), "stop."+fr.name, "a fraction of runs is at least 0 and below 1, got %v", *fr.v)
		}
	}
	for _, gb := range []struct {
		v    *float64
		name string
	}{{p.Stop.MinFreeGB, "min_free_gb"}, {p.Stop.MaxArtifactsGB, "max_artifacts_gb"}} {
		if gb.v != nil && *gb.v <= 0 {
			c.add(p.Stop.Meta.At(gb.name), "stop."+gb.name, "must be positive, got %v", *gb.v)
		}
	}
	if p.Retries.Infrastructure < 0 {
		c.add(p.Retries.Meta.At("infrastructure"), "retries.infrastructure", "retries cannot be negative, got %d", p.Retries.Infrastructure)
	}
	defaultPositive(c, &p.Cleanup.TimeoutS, 120, p.Cleanup.Meta, "cleanup", "timeout_s")
	if v := p.SampleIntervalS; v != nil && (*v < 0 || (*v > 0 && *v < 0.01)) {
		c.add(p.Meta.At("sample_interval_s"), "sample_interval_s", "a sampling interval is 0 (off) or at least 0.01 s, got %v", *v)
	}
	if p.IdleSettleS < 0 || p.IdleSettleS > 600 {
		c.add(p.Meta.At("idle_settle_s"), "idle_settle_s", "a settle period is 0 to 600 s, got %v", p.IdleSettleS)
	}
}

func (b *builder) validateValidators() {
	c := b.c
	names := map[string]bool{}
	each(b.p.Validators, "validators", func(f string, v *Validator) {
		define(c, names, true, v.Meta, f, "validator", v.Name) // a second definition is checked all the same
		defaultPositive(c, &v.TimeoutS, 600, v.Meta, f, "timeout_s")
		if _, given := v.Meta.Fields["memory_mib"]; given && v.MemoryMiB < 1 {
			c.add(v.Meta.At("memory_mib"), f+".memory_mib", "must be at least 1, got %v", v.MemoryMiB)
		}
		b.checkLoadNames(v.Loads, v.Meta.At("loads"), f)
		b.checkCellFilter(v.Cells, f+".cells")
		for j, name := range v.Phases {
			if !slices.ContainsFunc(b.p.Phases, func(ph Phase) bool { return ph.Name == name }) {
				b.c.add(v.Meta.At("phases"), fmt.Sprintf("%s.phases[%d]", f, j), "unknown phase %q", name)
			}
		}
	})
}

// checkCellFilter: every axis a filter names exists, and every value it
// lists is one of the axis's.
func (b *builder) checkCellFilter(cf CellFilter, f string) {
	for _, name := range slices.Sorted(maps.Keys(cf.Axes)) {
		sel := cf.Axes[name]
		if b.axes[name] == nil {
			b.c.add(sel.Pos, f+"."+name, "unknown axis %q (axes: %s)", name, strings.Join(slices.Sorted(maps.Keys(b.axes)), ", "))
			continue
		}
		if len(sel.Values) == 0 {
			b.c.add(sel.Pos, f+"."+name, "no values selected for axis %q", name)
		}
		for _, id := range sel.Values {
			if b.values[name][id] == nil {
				b.c.add(sel.Pos, f+"."+name, "axis %q has no value %q", name, id)
			}
		}
	}
}

func (b *builder) validateProvenance() {
	paths := map[string]bool{}
	each(b.p.Provenance, "provenance", func(f string, pf *ProvenanceFile) {
		if pf.Path == "" {
			return
		}
		if paths[pf.Path] {
			b.c.add(pf.Meta.At("path"), f+".path", "%s is listed twice", pf.Path)
		}
		paths[pf.Path] = true
		if strings.Contains(pf.Path, "${") {
			b.c.add(pf.Meta.At("path"), f+".path", "provenance paths are literal; variables are not expanded here")
		}
		if _, given := pf.Meta.Fields["sha256"]; given && !isSHA256(pf.SHA256) {
			b.c.add(pf.Meta.At("sha256"), f+".sha256", "a SHA-256 is 64 lower-case hex digits, got %q", pf.SHA256)
		}
		if _, given := pf.Meta.Fields["shards"]; given {
			if _, err := filepath.Match(pf.Shards, ""); err != nil || pf.Shards == "" || strings.Contains(pf.Shards, "/") {
				b.c.add(pf.Meta.At("shards"), f+".shards", "a glob of the directory's file names (no /), got %q", pf.Shards)
			}
			if pf.SHA256 != "" {
				b.c.add(pf.Meta.At("sha256"), f+".sha256", "a directory of shards has no one hash: freeze none, or list the files")
			}
			if pf.Private {
				b.c.add(pf.Meta.At("private"), f+".private", "model shards are hashed, never copied, and hold no private text to scan for: leave private out")
			}
		}
	})
}

// isSHA256 reports whether s is a hex SHA-256 in lower case.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
