package gates

import (
	"fmt"
	"time"
)

// Disk checks the campaign's disk before a wave (the seed's stop condition
// 9: "Stop if public artifacts exceed 8 GB or CPFS free space falls below
// 100 GB"). freeBytes is what the campaign's file system has free for an
// unprivileged writer; artifactBytes what the runs' directories hold. A nil
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
			v.Detail = fmt.Sprintf("the runs' artifacts hold %.2f GB, more than the %.1f GB limit", float64(artifactBytes)/1e9, *maxArtifactsGB)
		}
	}
	return v
}
