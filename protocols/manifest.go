package protocols

import (
	"path/filepath"
	"strings"
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
	var known []string
	for _, pf := range b.p.Provenance {
		if filepath.Clean(pf.Path) == filepath.Clean(path) {
			r.Manifest = pf.Path
			return
		}
		known = append(known, pf.Path)
	}
	list := strings.Join(known, ", ")
	if list == "" {
		list = "none"
	}
	b.c.add(pos, field, "run %s's manifest %q is not among the provenance files, so it has no hash recorded at start to check (provenance: %s)",
		r.ID, path, list)
}

// ManifestPath resolves a run's manifest as the campaign recorded it in
// its provenance: a relative path is relative to the workdir.
func ManifestPath(manifest, workdir string) string {
	if manifest == "" || filepath.IsAbs(manifest) {
		return manifest
	}
	return filepath.Join(workdir, manifest)
}
