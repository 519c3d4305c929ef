package protocols

import (
	"fmt"
	"path/filepath"
	"strings"
	"warden/internal/levenshtein"
)

// runManifest expands the load's manifest for the run and requires it to
// be one of the protocol's provenance files: only a file hashed at start
// has a frozen hash the client's report can be checked against.
func (b *builder) runManifest(r *Run, load *Load, vars map[string]string) {
	if load.Manifest == "" {
		return
	}
	pos, field := load.Meta.At("manifest"), "loads."+load.Name+".manifest"
	path, errs := expand(load.Manifest, func(n string) (string, bool) { v, ok := vars[n]; return v, ok }, nil, false)
	for _, e := range errs {
		b.c.add(pos, field, "%s (a manifest may use the run's plan-time variables)", e.msg)
	}
	if len(errs) > 0 {
		return
	}
	for _, pf := range b.p.Provenance {
		if filepath.Clean(pf.Path) == filepath.Clean(path) {
			r.Manifest = pf.Path
			return
		}
	}
	for i := range b.misses {
		if m := &b.misses[i]; m.pos == pos && m.field == field && m.path == path {
			m.runs = append(m.runs, r.ID)
			return
		}
	}
	b.misses = append(b.misses, manifestMiss{pos: pos, field: field, path: path, runs: []string{r.ID}})
}

// manifestMiss is a load's manifest that is not among the provenance
// files, with the runs whose manifest it is. It is reported once, after
// the inputs are looked for: a provenance file that does not exist and
// whose path is close to it is the cause (a typo), reported as such with
// the manifest beside it, instead of one symptom per run.
type manifestMiss struct {
	pos         Pos
	field, path string
	runs        []string
	explained   bool // the missing provenance file it is a typo of says it
}

// runsText names runs, at most three, and how many more.
func runsText(runs []string) string {
	if len(runs) <= 3 {
		return strings.Join(runs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(runs[:3], ", "), len(runs)-3)
}

// reportMisses reports the manifests not among the provenance files that
// no missing provenance file explains.
func (b *builder) reportMisses() {
	var known []string
	for _, pf := range b.p.Provenance {
		known = append(known, pf.Path)
	}
	list := strings.Join(known, ", ")
	if list == "" {
		list = "none"
	}
	for _, m := range b.misses {
		if !m.explained {
			b.c.add(m.pos, m.field, "the manifest %q (of run %s) is not among the provenance files, so it has no hash recorded at start to check (provenance: %s)",
				m.path, runsText(m.runs), list)
		}
	}
}

// explainMiss finds the manifest a missing provenance file at path is
// likely a typo of: the one not among the provenance files whose path is
// closest to it, within a third of its length (at least 3 edits). It
// marks it explained and says so, for the provenance file's problem; ""
// when none is close.
func (b *builder) explainMiss(path string) string {
	best, dist := -1, max(3, len(path)/3)+1
	for i, m := range b.misses {
		if d := levenshtein.Distance(filepath.Clean(m.path), filepath.Clean(path)); !m.explained && d < dist {
			best, dist = i, d
		}
	}
	if best < 0 {
		return ""
	}
	m := &b.misses[best]
	m.explained = true
	return fmt.Sprintf("; %s names %q (for run %s), which is not among the provenance files: one of the two paths is mistyped", m.field, m.path, runsText(m.runs))
}

// ManifestPath resolves a run's manifest as the campaign recorded it in
// its provenance: a relative path is relative to the workdir.
func ManifestPath(manifest, workdir string) string {
	if manifest == "" || filepath.IsAbs(manifest) {
		return manifest
	}
	return filepath.Join(workdir, manifest)
}
