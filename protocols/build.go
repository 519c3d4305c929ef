package protocols

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// Options shape a plan.
type Options struct {
	// Regime is the regime the estimate assumes for phases that do not pin
	// one. Empty means the first regime, the one the campaign tries first.
	Regime string
	// CheckInputs looks for the files and executables the runs will read
	// (see checkInputs): controller plan and start set it.
	CheckInputs bool
}

// maxProtocolBytes bounds a protocol file.
const maxProtocolBytes = 16 << 20

// PlanFile reads, validates and expands the protocol at path. The path
// must be a regular file (a link to one is followed) of at most 16 MiB: a
// FIFO or a device is refused, naming it, instead of blocking the reader.
func PlanFile(path string, opts Options) (*Plan, error) {
	data, err := readProtocol(path)
	if err != nil {
		return nil, fmt.Errorf("read protocol: %w", err)
	}
	return PlanBytes(path, data, opts)
}

func readProtocol(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > maxProtocolBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d a protocol may have", path, fi.Size(), maxProtocolBytes)
	}
	return io.ReadAll(io.LimitReader(f, maxProtocolBytes+1))
}

// PlanBytes validates and expands a protocol whose text is data; file
// names it in problems. A protocol that is not valid returns *Problems.
func PlanBytes(file string, data []byte, opts Options) (*Plan, error) {
	c := &collector{file: file}
	doc := parseDoc(c, data)
	if doc == nil {
		return nil, c.err()
	}
	var p Protocol
	d := &decoder{c: c}
	d.decode(doc.Content[0], reflectValue(&p), "")
	b := newBuilder(c, &p, opts)
	b.validate()
	if !b.checkRunCount() {
		return nil, c.err()
	}
	plan := b.expand()
	if opts.CheckInputs && c.err() == nil {
		checkInputs(c, &p, plan, file)
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	sum, err := CanonicalSHA256(doc)
	if err != nil {
		c.add(Pos{}, "", "%v", err)
		return nil, c.err()
	}
	plan.Protocol.File = file
	plan.Protocol.SHA256 = sum
	return plan, nil
}

// Parse decodes a protocol without expanding it, returning its problems
// as *Problems.
func Parse(file string, data []byte) (*Protocol, error) {
	c := &collector{file: file}
	doc := parseDoc(c, data)
	if doc == nil {
		return nil, c.err()
	}
	var p Protocol
	(&decoder{c: c}).decode(doc.Content[0], reflectValue(&p), "")
	return &p, c.err()
}

// SHA256 is the canonical hash of a protocol text (see Canonical).
func SHA256(data []byte) (string, error) {
	c := &collector{file: "protocol"}
	doc := parseDoc(c, data)
	if doc == nil {
		return "", c.err()
	}
	return CanonicalSHA256(doc)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func parseDoc(c *collector, data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			c.add(Pos{Line: 1}, "", "the file is empty: a protocol starts with \"warden: %d\"", FormatVersion)
			return nil
		}
		msg := err.Error()
		pos, field := Pos{}, ""
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			pos.Line, _ = strconv.Atoi(m[1])
			msg = m[2]
			pos.Line, pos.Column, field = locateSyntaxError(data, pos.Line, msg)
		}
		c.add(pos, field, "not valid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		c.add(posOf(&next), "", "a protocol file holds one YAML document; found a second one")
		return nil
	} else if !errors.Is(err, io.EOF) {
		c.add(Pos{}, "", "not valid YAML after the first document: %v", err)
		return nil
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		c.add(posOf(&doc), "", "a protocol is a mapping of fields, starting with \"warden: %d\"", FormatVersion)
		return nil
	}
	return &doc
}

var (
	safeID   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	axisName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

const maxIDLen = 128

func checkID(c *collector, pos Pos, field, what, id string) bool {
	switch {
	case id == "":
		return false // reported as missing
	case len(id) > maxIDLen:
		c.add(pos, field, "%s %q is longer than %d characters", what, id, maxIDLen)
	case !safeID.MatchString(id) || strings.Contains(id, ".."):
		c.add(pos, field, "%s %q is not a safe path component: use letters, digits, '.', '_' and '-', starting with a letter or digit, without \"..\"", what, id)
	default:
		return true
	}
	return false
}

type builder struct {
	c    *collector
	p    *Protocol
	opts Options

	slots   map[string]*slotInfo
	regimes map[string]*Regime
	classes map[string]*Class
	servers map[string]*Server
	loads   map[string]*Load
	axes    map[string]*Axis
	values  map[string]map[string]*AxisValue // axis -> id -> value
	regimeI map[string]int

	runs    []Run
	runPos  map[string]Pos // where each run's definition is, for errors about it
	needPos map[string][]Pos
	gates   []GateInfo
	units   int
}

type slotInfo struct {
	slot *Slot
	cpus []int
}

func newBuilder(c *collector, p *Protocol, opts Options) *builder {
	return &builder{
		c: c, p: p, opts: opts,
		slots: map[string]*slotInfo{}, regimes: map[string]*Regime{}, classes: map[string]*Class{},
		servers: map[string]*Server{}, loads: map[string]*Load{}, axes: map[string]*Axis{},
		values: map[string]map[string]*AxisValue{}, regimeI: map[string]int{},
		runPos: map[string]Pos{}, needPos: map[string][]Pos{},
	}
}

func (b *builder) validate() {
	p, c := b.p, b.c
	if _, ok := p.Meta.Fields["warden"]; ok && p.Warden != FormatVersion {
		c.add(p.Meta.At("warden"), "warden", "protocol format %d is not supported; this controller reads format %d", p.Warden, FormatVersion)
	}
	checkID(c, p.Meta.At("name"), "name", "protocol name", p.Name)
	if m := p.Privacy.MinLeakBytes; m != nil && *m < MinLeakBytesFloor {
		c.add(p.Privacy.Meta.At("min_leak_bytes"), "privacy.min_leak_bytes", "must be at least %d bytes (shorter runs of a prompt turn up by chance), got %d", MinLeakBytesFloor, *m)
	}

	// host
	h := &p.Host
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

	// budget
	bu := &p.Budget
	if _, ok := bu.Meta.Fields["cap_gpu_hours"]; ok && bu.CapGPUHours <= 0 {
		c.add(bu.Meta.At("cap_gpu_hours"), "budget.cap_gpu_hours", "the GPU-hour cap must be positive, got %v", bu.CapGPUHours)
	}
	if bu.ConsumedGPUHours < 0 {
		c.add(bu.Meta.At("consumed_gpu_hours"), "budget.consumed_gpu_hours", "GPU-hours already consumed cannot be negative, got %v", bu.ConsumedGPUHours)
	} else if bu.CapGPUHours > 0 && bu.ConsumedGPUHours >= bu.CapGPUHours {
		c.add(bu.Meta.At("consumed_gpu_hours"), "budget.consumed_gpu_hours", "%v GPU-hours already consumed leaves nothing under the cap of %v", bu.ConsumedGPUHours, bu.CapGPUHours)
	}

	switch bu.Reserve {
	case "":
		bu.Reserve = "bounds"
	case "nominal", "bounds":
	default:
		c.add(bu.Meta.At("reserve"), "budget.reserve", "reserve is nominal or bounds, got %q", bu.Reserve)
	}

	// vars
	for _, name := range sortedKeys(p.Vars) {
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

	b.validateSlots()
	b.validateExecutor()

	// regimes
	for i := range p.Regimes {
		r := &p.Regimes[i]
		f := fmt.Sprintf("regimes[%d]", i)
		if !checkID(c, r.Meta.At("name"), f+".name", "regime name", r.Name) {
			continue
		}
		if _, dup := b.regimes[r.Name]; dup {
			c.add(r.Meta.At("name"), f+".name", "regime %q is defined twice", r.Name)
			continue
		}
		b.regimes[r.Name] = r
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
			if _, ok := b.slots[s]; !ok {
				c.add(r.Meta.At("slots"), fmt.Sprintf("%s.slots[%d]", f, j), "unknown slot %q (slots: %s)", s, strings.Join(sortedKeys(b.slots), ", "))
			}
		}
	}
	if b.opts.Regime != "" && b.regimes[b.opts.Regime] == nil {
		c.add(Pos{}, "regime", "the protocol has no regime %q (it has: %s)", b.opts.Regime, strings.Join(b.regimeNames(), ", "))
	}

	// classes
	for i := range p.Classes {
		cl := &p.Classes[i]
		f := fmt.Sprintf("classes[%d]", i)
		if !checkID(c, cl.Meta.At("name"), f+".name", "class name", cl.Name) {
			continue
		}
		if _, dup := b.classes[cl.Name]; dup {
			c.add(cl.Meta.At("name"), f+".name", "class %q is defined twice", cl.Name)
			continue
		}
		b.classes[cl.Name] = cl
		if _, ok := cl.Meta.Fields["drain_allowance_s"]; ok && cl.DrainAllowanceS <= 0 {
			c.add(cl.Meta.At("drain_allowance_s"), f+".drain_allowance_s", "drain allowance must be positive, got %v", cl.DrainAllowanceS)
		}
		if _, ok := cl.Meta.Fields["watchdog_s"]; ok && cl.WatchdogS < cl.DrainAllowanceS {
			c.add(cl.Meta.At("watchdog_s"), f+".watchdog_s", "the hard watchdog (%v s) must not be shorter than the drain allowance (%v s)", cl.WatchdogS, cl.DrainAllowanceS)
		}
	}

	// servers
	for i := range p.Servers {
		s := &p.Servers[i]
		f := fmt.Sprintf("servers[%d]", i)
		if !checkID(c, s.Meta.At("name"), f+".name", "server name", s.Name) {
			continue
		}
		if _, dup := b.servers[s.Name]; dup {
			c.add(s.Meta.At("name"), f+".name", "server %q is defined twice", s.Name)
			continue
		}
		b.servers[s.Name] = s
		def, known := serverKinds[s.Kind]
		switch {
		case s.Kind == "":
		case !known:
			c.add(s.Meta.At("kind"), f+".kind", "unknown server kind %q (known: %s)", s.Kind, strings.Join(sortedKeys(serverKinds), ", "))
		case s.Health == nil && def.Path == "":
			c.add(s.Meta.Pos, f+".health", "a %s server needs a health probe: health: {path: /health, status: 200}", s.Kind)
		case s.Health == nil:
			h := def
			s.Health = &h
		}
		if s.Health != nil {
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
	}

	// loads
	for i := range p.Loads {
		l := &p.Loads[i]
		f := fmt.Sprintf("loads[%d]", i)
		if !checkID(c, l.Meta.At("name"), f+".name", "load name", l.Name) {
			continue
		}
		if _, dup := b.loads[l.Name]; dup {
			c.add(l.Meta.At("name"), f+".name", "load %q is defined twice", l.Name)
			continue
		}
		b.loads[l.Name] = l
		if _, ok := loadKinds[l.Kind]; !ok && l.Kind != "" {
			c.add(l.Meta.At("kind"), f+".kind", "unknown load kind %q (known: %s)", l.Kind, strings.Join(sortedKeys(loadKinds), ", "))
		}
		if l.Server != "" && b.servers[l.Server] == nil {
			c.add(l.Meta.At("server"), f+".server", "unknown server %q (servers: %s)", l.Server, strings.Join(sortedKeys(b.servers), ", "))
		}
		if l.Class != "" && b.classes[l.Class] == nil {
			c.add(l.Meta.At("class"), f+".class", "unknown class %q (classes: %s)", l.Class, strings.Join(sortedKeys(b.classes), ", "))
		}
		if _, ok := l.Meta.Fields["expected_s"]; ok && l.ExpectedS <= 0 {
			c.add(l.Meta.At("expected_s"), f+".expected_s", "expected duration must be positive, got %v", l.ExpectedS)
		}
		if _, ok := l.Meta.Fields["deadline_s"]; ok && l.DeadlineS <= 0 {
			c.add(l.Meta.At("deadline_s"), f+".deadline_s", "the measuring deadline must be positive, got %v", l.DeadlineS)
		}
		switch l.AdmissionEnd {
		case "":
			l.AdmissionEnd = "phase-file"
		case "phase-file", "result-file":
		default:
			c.add(l.Meta.At("admission_end"), f+".admission_end", "admission_end is phase-file or result-file, got %q", l.AdmissionEnd)
		}
		if l.ResultFile == "" {
			l.ResultFile = "client/result.json"
		} else if filepath.IsAbs(l.ResultFile) || strings.HasPrefix(filepath.Clean(l.ResultFile), "..") {
			c.add(l.Meta.At("result_file"), f+".result_file", "result_file is relative to the attempt directory and stays inside it, got %q", l.ResultFile)
		}
		switch l.ClientStart {
		case "":
			l.ClientStart = "after-ready"
		case "after-ready", "at-start":
		default:
			c.add(l.Meta.At("client_start"), f+".client_start", "client_start is after-ready or at-start, got %q", l.ClientStart)
		}
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
	for i := range p.Loads { // after all loads are known
		l := &p.Loads[i]
		for j, n := range l.Needs {
			if n.Load != "" && b.loads[n.Load] == nil {
				c.add(n.Pos, fmt.Sprintf("loads[%d].needs[%d]", i, j), "needs load %q, which is not defined", n.Load)
			}
		}
	}

	// axes
	for i := range p.Axes {
		a := &p.Axes[i]
		f := fmt.Sprintf("axes[%d]", i)
		if a.Name == "" {
			continue
		}
		if !axisName.MatchString(a.Name) {
			c.add(a.Meta.At("name"), f+".name", "axis name %q must be lower case letters, digits and _", a.Name)
			continue
		}
		if _, dup := b.axes[a.Name]; dup {
			c.add(a.Meta.At("name"), f+".name", "axis %q is defined twice", a.Name)
			continue
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
		for j := range a.Values {
			v := &a.Values[j]
			vf := fmt.Sprintf("%s.values[%d]", f, j)
			if !checkID(c, v.Meta.At("id"), vf+".id", "axis value", v.ID) {
				continue
			}
			if _, dup := b.values[a.Name][v.ID]; dup {
				c.add(v.Meta.At("id"), vf+".id", "value %q appears twice on axis %q", v.ID, a.Name)
				continue
			}
			b.values[a.Name][v.ID] = v
			if v.Class != "" && b.classes[v.Class] == nil {
				c.add(v.Meta.At("class"), vf+".class", "unknown class %q (classes: %s)", v.Class, strings.Join(sortedKeys(b.classes), ", "))
			}
			if v.Server != "" && b.servers[v.Server] == nil {
				c.add(v.Meta.At("server"), vf+".server", "unknown server %q (servers: %s)", v.Server, strings.Join(sortedKeys(b.servers), ", "))
			}
			if v.GPUs < 0 {
				c.add(v.Meta.At("gpus"), vf+".gpus", "GPU count cannot be negative, got %d", v.GPUs)
			} else if v.GPUs > h.GPUs && h.GPUs > 0 {
				c.add(v.Meta.At("gpus"), vf+".gpus", "needs %d GPUs; the host has %d", v.GPUs, h.GPUs)
			}
			for _, name := range sortedKeys(v.Vars) {
				switch {
				case !varName.MatchString(name):
					c.add(v.Meta.At("vars"), vf+".vars."+name, "variable name %q must be upper case letters, digits and _", name)
				case isBuiltin(name):
					c.add(v.Meta.At("vars"), vf+".vars."+name, "variable %s is built in and cannot be redefined", name)
				}
			}
			b.checkExpects(v.Expect, vf+".expect")
		}
	}

	// phases
	phaseNames := map[string]bool{}
	for i := range p.Phases {
		ph := &p.Phases[i]
		f := fmt.Sprintf("phases[%d]", i)
		if checkID(c, ph.Meta.At("name"), f+".name", "phase name", ph.Name) {
			if phaseNames[ph.Name] {
				c.add(ph.Meta.At("name"), f+".name", "phase %q is defined twice", ph.Name)
			}
			phaseNames[ph.Name] = true
		}
		if ph.Kind != "" && !phaseKinds[ph.Kind] {
			c.add(ph.Meta.At("kind"), f+".kind", "unknown phase kind %q (known: %s)", ph.Kind, strings.Join(sortedKeys(phaseKinds), ", "))
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
		if ph.Kind == "colocation" {
			if ph.Colocation == nil {
				c.add(ph.Meta.Pos, f+".colocation", "a colocation phase needs a colocation: section")
			}
			if ph.Matrix != nil {
				c.add(ph.Meta.At("matrix"), f+".matrix", "a colocation phase takes its cells from colocation:, not a matrix")
			}
			continue
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
		for j, l := range ph.Loads {
			if b.loads[l] == nil {
				c.add(ph.Meta.At("loads"), fmt.Sprintf("%s.loads[%d]", f, j), "unknown load %q (loads: %s)", l, strings.Join(sortedKeys(b.loads), ", "))
			}
		}
		b.checkOrder(ph, f)
	}
	if _, ok := p.Meta.Fields["phases"]; ok && len(p.Phases) == 0 {
		c.add(p.Meta.At("phases"), "phases", "the protocol has no phases, so no runs")
	}

	// stop, retries, cleanup
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

	// validators and provenance
	vnames := map[string]bool{}
	for i, v := range p.Validators {
		f := fmt.Sprintf("validators[%d]", i)
		if checkID(c, v.Meta.At("name"), f+".name", "validator name", v.Name) {
			if vnames[v.Name] {
				c.add(v.Meta.At("name"), f+".name", "validator %q is defined twice", v.Name)
			}
			vnames[v.Name] = true
		}
		defaultPositive(c, &p.Validators[i].TimeoutS, 600, v.Meta, f, "timeout_s")
		if _, given := v.Meta.Fields["memory_mib"]; given && v.MemoryMiB < 1 {
			c.add(v.Meta.At("memory_mib"), f+".memory_mib", "must be at least 1, got %v", v.MemoryMiB)
		}
		for j, l := range v.Loads {
			if b.loads[l] == nil {
				c.add(v.Meta.At("loads"), fmt.Sprintf("%s.loads[%d]", f, j), "unknown load %q (loads: %s)", l, strings.Join(sortedKeys(b.loads), ", "))
			}
		}
	}
	paths := map[string]bool{}
	for i, pf := range p.Provenance {
		f := fmt.Sprintf("provenance[%d]", i)
		if pf.Path == "" {
			continue
		}
		if paths[pf.Path] {
			c.add(pf.Meta.At("path"), f+".path", "%s is listed twice", pf.Path)
		}
		paths[pf.Path] = true
		if strings.Contains(pf.Path, "${") {
			c.add(pf.Meta.At("path"), f+".path", "provenance paths are literal; variables are not expanded here")
		}
	}
}

func defaultPositive(c *collector, v *float64, def float64, m Meta, f, name string) {
	if _, given := m.Fields[name]; !given {
		*v = def
		return
	}
	if *v <= 0 {
		c.add(m.At(name), f+"."+name, "must be positive, got %v", *v)
	}
}

func (b *builder) checkExpects(es []Expect, f string) {
	for i, e := range es {
		ef := fmt.Sprintf("%s[%d]", f, i)
		switch {
		case e.Pattern != "" && (e.Path != "" || e.Equals.JSON != ""):
			b.c.add(e.Meta.Pos, ef, "an expectation is a log pattern or a path with its value (equals), not both")
		case e.Pattern == "" && e.Path == "":
			b.c.add(e.Meta.Pos, ef, "an expectation needs a pattern (the startup log) or a path and equals (the server's reported configuration)")
		case e.Path != "" && e.Equals.JSON == "":
			b.c.add(e.Meta.Pos, ef+".equals", "the expectation at path %q needs the value it must hold (equals)", e.Path)
		case e.Pattern != "":
			if _, err := regexp.Compile(e.Pattern); err != nil {
				b.c.add(e.Meta.At("pattern"), ef+".pattern", "not a valid regular expression: %v", err)
			}
		}
	}
}

func (b *builder) checkEnvNames(env map[string]string, pos Pos, f string) {
	envName := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, k := range sortedKeys(env) {
		if !envName.MatchString(k) {
			b.c.add(pos, f+"."+k, "%q is not an environment variable name", k)
		}
	}
}

// DefaultQueueTimeoutS is how long a Slurm step waits for busy
// resources when the protocol does not say.
const DefaultQueueTimeoutS = 600

func (b *builder) validateExecutor() {
	e, c := &b.p.Executor, b.c
	switch e.Kind {
	case "", "local":
		if len(e.Slurm.Meta.Fields) > 0 {
			c.add(e.Meta.At("slurm"), "executor.slurm", "slurm settings need executor.kind: slurm")
		}
		return
	case "slurm":
	default:
		c.add(e.Meta.At("kind"), "executor.kind", "executor is local or slurm, got %q", e.Kind)
		return
	}
	sx := &e.Slurm
	if sx.QueueTimeoutS == 0 {
		sx.QueueTimeoutS = DefaultQueueTimeoutS
	} else if sx.QueueTimeoutS < 0 {
		c.add(sx.Meta.At("queue_timeout_s"), "executor.slurm.queue_timeout_s", "must be positive, got %d", sx.QueueTimeoutS)
	}
	if sx.Nodes == 0 {
		sx.Nodes = 1
	} else if sx.Nodes < 0 {
		c.add(sx.Meta.At("nodes"), "executor.slurm.nodes", "must be at least 1, got %d", sx.Nodes)
	}
	if sx.Exclusive && sx.Nodes > 0 {
		// a node per step: more runs at once than nodes would queue
		for i, r := range b.p.Regimes {
			if r.Concurrency > sx.Nodes {
				c.add(sx.Meta.At("nodes"), "executor.slurm.nodes", "exclusive steps take a node each: regime %s (regimes[%d]) runs %d at once on %d node(s)", r.Name, i, r.Concurrency, sx.Nodes)
			}
		}
	}
}

func (b *builder) validateSlots() {
	p, c := b.p, b.c
	gpuOwner := map[int]string{}
	cpuOwner := map[int]string{}
	ports := map[int]string{}
	for i := range p.Slots {
		s := &p.Slots[i]
		f := fmt.Sprintf("slots[%d]", i)
		if !checkID(c, s.Meta.At("name"), f+".name", "slot name", s.Name) {
			continue
		}
		if _, dup := b.slots[s.Name]; dup {
			c.add(s.Meta.At("name"), f+".name", "slot %q is defined twice", s.Name)
			continue
		}
		info := &slotInfo{slot: s}
		b.slots[s.Name] = info
		if _, ok := s.Meta.Fields["gpus"]; ok && len(s.GPUs) == 0 {
			c.add(s.Meta.At("gpus"), f+".gpus", "slot %s has no GPUs", s.Name)
		}
		for _, g := range s.GPUs {
			switch {
			case g < 0 || (p.Host.GPUs > 0 && g >= p.Host.GPUs):
				c.add(s.Meta.At("gpus"), f+".gpus", "GPU %d is outside the host, which has GPUs 0-%d", g, p.Host.GPUs-1)
			case gpuOwner[g] != "":
				c.add(s.Meta.At("gpus"), f+".gpus", "GPU %d is already in slot %s; slots cannot share GPUs", g, gpuOwner[g])
			default:
				gpuOwner[g] = s.Name
			}
		}
		if s.CPUs != "" {
			cpus, err := ParseCPUList(s.CPUs)
			if err != nil {
				c.add(s.Meta.At("cpus"), f+".cpus", "%v", err)
			} else {
				info.cpus = cpus
				var outside, overlap []int
				with := ""
				for _, cpu := range cpus {
					if p.Host.CPUs > 0 && cpu >= p.Host.CPUs {
						outside = append(outside, cpu)
					} else if o := cpuOwner[cpu]; o != "" {
						overlap = append(overlap, cpu)
						with = o
					} else {
						cpuOwner[cpu] = s.Name
					}
				}
				if len(outside) > 0 {
					c.add(s.Meta.At("cpus"), f+".cpus", "CPUs %s are outside the host, which has CPUs 0-%d", FormatCPUList(outside), p.Host.CPUs-1)
				}
				if len(overlap) > 0 {
					c.add(s.Meta.At("cpus"), f+".cpus", "CPUs %s are also in slot %s; CPU masks of slots must be disjoint", FormatCPUList(overlap), with)
				}
			}
		}
		if s.NUMA != nil && (*s.NUMA < 0 || *s.NUMA >= p.Host.NUMANodes) {
			c.add(s.Meta.At("numa"), f+".numa", "NUMA node %d is outside the host, which has nodes 0-%d", *s.NUMA, p.Host.NUMANodes-1)
		}
		if _, ok := s.Meta.Fields["port"]; ok && !s.Port.Auto {
			switch {
			case s.Port.N < 1 || s.Port.N > 65535:
				c.add(s.Meta.At("port"), f+".port", "%d is not a TCP port", s.Port.N)
			case ports[s.Port.N] != "":
				c.add(s.Meta.At("port"), f+".port", "port %d is already slot %s's", s.Port.N, ports[s.Port.N])
			default:
				ports[s.Port.N] = s.Name
			}
		}
	}
}

func (b *builder) checkOrder(ph *Phase, f string) {
	o := &ph.Order
	c := b.c
	if o.By == "" && o.Meta.Pos.Line == 0 {
		o.By = "listed"
		return
	}
	switch o.By {
	case "listed":
	case "sha256":
		if o.Key == "" {
			c.add(o.Meta.Pos, f+".order.key", "order by sha256 needs a key template, e.g. key: \"SEED:${PATTERN}:${CONFIG}\"")
		}
	case "shuffle":
	case "alternate":
		if o.Axis == "" {
			c.add(o.Meta.Pos, f+".order.axis", "order by alternate needs the axis whose values alternate")
		} else if ph.Matrix != nil {
			if _, ok := ph.Matrix.Axes[o.Axis]; !ok {
				c.add(o.Meta.At("axis"), f+".order.axis", "axis %q is not in this phase's matrix", o.Axis)
			}
		}
	case "":
	default:
		c.add(o.Meta.At("by"), f+".order.by", "unknown order %q (listed, sha256, shuffle, alternate)", o.By)
	}
}

func (b *builder) regimeNames() []string {
	var out []string
	for _, r := range b.p.Regimes {
		out = append(out, r.Name)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
