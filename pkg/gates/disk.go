package gates

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"time"
)

// ArtifactBytes is the size, in bytes, of the regular files under each of
// dirs, dir by dir (their apparent sizes, links not followed; a missing
// dir holds 0): what the campaign's public artifacts hold, the runs'
// directories and the provenance copies alike.
func ArtifactBytes(dirs ...string) []uint64 {
	out := make([]uint64, len(dirs))
	for i, d := range dirs {
		filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				if fi, err := e.Info(); err == nil {
					out[i] += uint64(fi.Size())
				}
			}
			return nil
		})
	}
	return out
}

// Total is the sum of sizes.
func Total(sizes []uint64) uint64 {
	var t uint64
	for _, n := range sizes {
		t += n
	}
	return t
}

// Disk checks the campaign's disk before a wave (the seed's stop condition
// 9: "Stop if public artifacts exceed 8 GB or CPFS free space falls below
// 100 GB"). freeBytes is what the campaign's file system has free for an
// unprivileged writer; artifactBytes what the public artifacts hold: the
// runs' directories and the provenance copies (DIR/provenance: the
// protocol, helpers and public manifests, one copy per content). A nil
// limit is not checked. Figures: free_gb, artifacts_gb and the limits. A
// fail stops the campaign before the wave launches.
func Disk(freeBytes, artifactBytes uint64, minFreeGB, maxArtifactsGB *float64, now time.Time) Verdict {
	v := Verdict{Gate: "disk", Verdict: Pass, At: now, Figures: map[string]float64{
		"free_gb":      float64(freeBytes) / 1e9,
		"artifacts_gb": float64(artifactBytes) / 1e9,
	}}
	if minFreeGB != nil {
		v.Figures["min_free_gb"] = *minFreeGB
		if float64(freeBytes)/1e9 < *minFreeGB {
			v.Verdict = Fail
			v.Detail = fmt.Sprintf("%.1f GB free on the campaign's file system, below the %.1f GB minimum", float64(freeBytes)/1e9, *minFreeGB)
			return v
		}
	}
	if maxArtifactsGB != nil {
		v.Figures["max_artifacts_gb"] = *maxArtifactsGB
		if float64(artifactBytes)/1e9 > *maxArtifactsGB {
			v.Verdict = Fail
			v.Detail = fmt.Sprintf("the public artifacts (the runs and the provenance copies) hold %.3f GB, more than the %g GB limit", float64(artifactBytes)/1e9, *maxArtifactsGB)
		}
	}
	return v
}
