package protocols

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"warden/internal/cpulist"

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
	if opts.CheckInputs {
		// the provenance files always (a missing one can be the cause of
		// other problems: a manifest typed otherwise), the rest of the
		// inputs when nothing else is wrong
		checkInputs(c, b, &p, plan, file, c.err() == nil)
	}
	b.reportMisses()
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
	// misses are the loads' manifests not among the provenance files
	// (runManifest), reported after the inputs are looked for.
	misses []manifestMiss
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
	for _, k := range slices.Sorted(maps.Keys(env)) {
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
		info := &slotInfo{slot: s}
		if !define(c, b.slots, info, s.Meta, f, "slot", s.Name) {
			continue
		}
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
			cpus, err := cpulist.Parse(s.CPUs)
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
					c.add(s.Meta.At("cpus"), f+".cpus", "CPUs %s are outside the host, which has CPUs 0-%d", cpulist.Format(outside), p.Host.CPUs-1)
				}
				if len(overlap) > 0 {
					c.add(s.Meta.At("cpus"), f+".cpus", "CPUs %s are also in slot %s; CPU masks of slots must be disjoint", cpulist.Format(overlap), with)
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

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
