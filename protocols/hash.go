package protocols

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Canonical returns the canonical form of a parsed protocol document: JSON
// with mapping keys sorted, scalars written by their resolved type (so
// 16.0 and 16 are the same number, "16" a different string), aliases
// expanded, and comments, layout and key order gone.
func Canonical(doc *yaml.Node) ([]byte, error) {
	var b strings.Builder
	if err := canon(&b, doc, 0); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// CanonicalSHA256 is the hex SHA-256 of Canonical: the protocol's identity.
func CanonicalSHA256(doc *yaml.Node) (string, error) {
	c, err := Canonical(doc)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

type canonError string

func (e canonError) Error() string { return string(e) }

func canon(b *strings.Builder, n *yaml.Node, depth int) error {
	if depth > 100 {
		return canonError("document nests too deeply")
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			b.WriteString("null")
			return nil
		}
		return canon(b, n.Content[0], depth+1)
	case yaml.AliasNode:
		return canon(b, n.Alias, depth+1)
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canon(b, c, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.MappingNode:
		type kv struct {
			k string
			v *yaml.Node
		}
		var kvs []kv
		for i := 0; i+1 < len(n.Content); i += 2 {
			kvs = append(kvs, kv{n.Content[i].Value, n.Content[i+1]})
		}
		sort.SliceStable(kvs, func(i, j int) bool { return kvs[i].k < kvs[j].k })
		b.WriteByte('{')
		for i, e := range kvs {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, e.k)
			b.WriteByte(':')
			if err := canon(b, e.v, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			b.WriteString(strconv.FormatBool(strings.EqualFold(n.Value, "true")))
		case "!!int":
			if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
				b.WriteString(strconv.FormatFloat(float64(i), 'g', -1, 64))
				return nil
			}
			writeJSONString(b, n.Value)
		case "!!float":
			f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				writeJSONString(b, n.Value)
				return nil
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		default:
			writeJSONString(b, n.Value)
		}
	}
	return nil
}

func writeJSONString(b *strings.Builder, s string) {
	j, _ := json.Marshal(s) // a string always marshals
	b.Write(j)
}
