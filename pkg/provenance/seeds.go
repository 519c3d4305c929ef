package provenance

import (
	"fmt"
	"path/filepath"

	"warden/pkg/atomicfile"
)

// SeedsFile is DIR/provenance/seeds.json: every seed the protocol names
// (seed 002: "Record ... all raw analysis seeds"; its workload 20260712,
// execution order 20260713 and bootstrap/permutation 20260714), written at
// start and again by an amendment that installs another protocol, beside
// the protocol copy whose hash covers them.
const SeedsFile = "seeds.json"

// Seeds is the content of seeds.json.
type Seeds struct {
	Schema         string           `json:"schema"`
	ProtocolSHA256 string           `json:"protocol_sha256"`
	Seeds          map[string]int64 `json:"seeds"`
}

// SeedsSchema names seeds.json's format.
const SeedsSchema = "warden.seeds/1"

// WriteSeeds writes seeds.json (an empty map when the protocol names no
// seed: recorded as none, not absent).
func WriteSeeds(campaignDir, protocolSHA256 string, seeds map[string]int64) error {
	if seeds == nil {
		seeds = map[string]int64{}
	}
	path := filepath.Join(campaignDir, SubDir, SeedsFile)
	if err := atomicfile.WriteJSON(path, Seeds{Schema: SeedsSchema, ProtocolSHA256: protocolSHA256, Seeds: seeds}, 0o444); err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	return nil
}
