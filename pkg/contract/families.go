package contract

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"

	"go.yaml.in/yaml/v3"
)

// The kernel-to-operator-family mapping of seed 002 ("Kernel-to-operator-
// family mapping"): a versioned table of priority-ordered rules, first match
// wins, read from a data file whose SHA-256 names it in every verdict. v1,
// the seed's table, is built in (mappings/opfamily-v1.yaml); another
// version is a file given to the validator (an amendment).

//go:embed mappings/opfamily-v1.yaml
var mappingV1 []byte

// The families of the v1 table, in the seed's priority order, and the two
// labels that are not families: "other" (no rule matched) and
// "graph_replay_opaque" (a graph replay with no child kernel activity).
const (
	FamilyOther  = "other"
	FamilyOpaque = "graph_replay_opaque"
	// FamilyAttention is split by the joined step's tokens into
	// attention_prefill, attention_decode and attention_mixed.
	FamilyAttention = "attention"
)

// Mapping is a loaded table.
type Mapping struct {
	Name    string
	Version int
	SHA256  string // of the file's bytes
	scopes  []string
	scopeNs []string // the scopes' names, in bit order
	rules   []mappingRule
	cache   map[classKey]string
}

type mappingRule struct {
	family   string
	name     *regexp.Regexp
	scope    uint64 // all of these scopes must hold
	notScope uint64 // none of these may hold
}

type classKey struct {
	name   string
	scopes uint64
}

type mappingFile struct {
	Name    string            `yaml:"name"`
	Version int               `yaml:"version"`
	Scopes  map[string]string `yaml:"scopes"`
	Rules   []struct {
		Family   string   `yaml:"family"`
		Name     string   `yaml:"name"`
		Scope    []string `yaml:"scope"`
		NotScope []string `yaml:"not_scope"`
	} `yaml:"rules"`
}

// DefaultMapping is the built-in v1 table.
func DefaultMapping() *Mapping {
	m, err := ParseMapping(mappingV1)
	if err != nil {
		panic("built-in mapping: " + err.Error())
	}
	return m
}

// LoadMapping reads a table from a file.
func LoadMapping(path string) (*Mapping, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mapping: %w", err)
	}
	m, err := ParseMapping(b)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return m, nil
}

// ParseMapping decodes a table strictly: unknown keys, an empty rule list,
// a rule without a family or name, an unknown scope, a family named like
// one of the two labels, or a pattern that does not compile are errors.
func ParseMapping(b []byte) (*Mapping, error) {
	var f mappingFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if f.Name == "" || f.Version < 1 {
		return nil, fmt.Errorf("a mapping needs a name and a version of at least 1")
	}
	if len(f.Rules) == 0 {
		return nil, fmt.Errorf("no rules")
	}
	sum := sha256.Sum256(b)
	m := &Mapping{Name: f.Name, Version: f.Version, SHA256: hex.EncodeToString(sum[:]), cache: map[classKey]string{}}
	bit := map[string]uint64{}
	for _, s := range slices.Sorted(maps.Keys(f.Scopes)) {
		if _, err := regexp.Compile(f.Scopes[s]); err != nil {
			return nil, fmt.Errorf("scope %s: %w", s, err)
		}
		if len(m.scopes) == 64 {
			return nil, fmt.Errorf("more than 64 scopes")
		}
		bit[s] = 1 << len(m.scopes)
		m.scopes = append(m.scopes, f.Scopes[s])
		m.scopeNs = append(m.scopeNs, s)
	}
	mask := func(i int, names []string) (uint64, error) {
		var x uint64
		for _, n := range names {
			b, ok := bit[n]
			if !ok {
				return 0, fmt.Errorf("rule %d: unknown scope %q", i+1, n)
			}
			x |= b
		}
		return x, nil
	}
	for i, r := range f.Rules {
		if r.Family == "" || r.Name == "" {
			return nil, fmt.Errorf("rule %d: needs a family and a name pattern", i+1)
		}
		if r.Family == FamilyOther || r.Family == FamilyOpaque {
			return nil, fmt.Errorf("rule %d: %q is not a family a rule can give", i+1, r.Family)
		}
		re, err := regexp.Compile(r.Name)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i+1, err)
		}
		sc, err := mask(i, r.Scope)
		if err != nil {
			return nil, err
		}
		ns, err := mask(i, r.NotScope)
		if err != nil {
			return nil, err
		}
		m.rules = append(m.rules, mappingRule{family: r.Family, name: re, scope: sc, notScope: ns})
	}
	return m, nil
}

// Label names the table in a verdict: name/vN sha256:HEX.
func (m *Mapping) Label() string {
	return fmt.Sprintf("%s/v%d sha256:%s", m.Name, m.Version, m.SHA256)
}

// Families lists the families the rules can give, sorted.
func (m *Mapping) Families() []string {
	seen := map[string]bool{}
	for _, r := range m.rules {
		seen[r.family] = true
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// scopeMatchers compiles the scopes' patterns, in bit order.
func (m *Mapping) scopeMatchers() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(m.scopes))
	for i, s := range m.scopes {
		out[i] = regexp.MustCompile(s)
	}
	return out
}

// Classify gives the family of a kernel by its name and the scopes its
// parents hold (a bit set, in the order of scopeMatchers): the first rule
// whose name pattern matches and whose scope conditions hold, else other.
// A Mapping is not safe for concurrent Classify calls (it caches).
func (m *Mapping) Classify(name string, scopes uint64) string {
	k := classKey{name, scopes}
	if f, ok := m.cache[k]; ok {
		return f
	}
	f := FamilyOther
	for _, r := range m.rules {
		if scopes&r.scope == r.scope && scopes&r.notScope == 0 && r.name.MatchString(name) {
			f = r.family
			break
		}
	}
	m.cache[k] = f
	return f
}

// clone gives a copy with its own cache, for another goroutine.
func (m *Mapping) clone() *Mapping {
	c := *m
	c.cache = map[classKey]string{}
	return &c
}
