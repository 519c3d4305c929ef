package contract

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"warden/pkg/atomicfile"
	"warden/pkg/provenance"
)

// The records seed 002 names beside the checks ("Record source/patched
// commit, ... model path and shard hashes, ... MoE backend, compile cache
// key"; "Every GPU launch must first record ... compile-cache key, and
// effective vLLM config"), read from where the server exposes them
// (docs/servers.md, "What a run records"):
//
//   - the compile cache: vLLM's startup line "Using cache directory: DIR
//     for vLLM's torch.compile" (vllm/compilation/backends.py), DIR being
//     VLLM_CACHE_ROOT/torch_compile_cache/KEY/rank_R_D[/PREFIX]: the key
//     is the component after torch_compile_cache; "vLLM's torch.compile
//     cache is disabled." records the key "disabled";
//   - the MoE backend: "Using BACKEND QUANT MoE backend out of potential
//     backends: [...]" (vllm/model_executor/layers/fused_moe/oracle/);
//   - the server's version and source commit: /server_info's
//     system_env.vllm_version, "VERSION (git sha: SHA[, date: D])" for a
//     build from a git checkout (vllm/collect_env.py get_vllm_version), as
//     kept in server-config.json;
//   - the model's shards: the campaign's provenance index (a provenance
//     entry with shards:, hashed once per campaign).
//
// A record the server did not expose is the string "unknown" (a list:
// empty) and its name is in "unknown": never silently absent.

// RecordsSchema names the format of records.json.
const RecordsSchema = "warden.records/1"

// Unknown is the value of a record that could not be read.
const Unknown = "unknown"

// ShardRecord is one model shard as the campaign recorded it.
type ShardRecord struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// RunRecords is records.json.
type RunRecords struct {
	Schema string `json:"schema"`
	// CompileCacheKeys and CompileCacheDirs are every key and directory
	// the server's ranks logged, sorted and without repeats.
	CompileCacheKeys []string      `json:"compile_cache_keys"`
	CompileCacheDirs []string      `json:"compile_cache_dirs"`
	MoEBackend       string        `json:"moe_backend"`
	MoEQuant         string        `json:"moe_quant"`
	ServerVersion    string        `json:"server_version"`
	SourceCommit     string        `json:"source_commit"`
	ModelShards      []ShardRecord `json:"model_shards"`
	// Unknown names the records above that could not be read.
	Unknown []string `json:"unknown"`
}

var (
	compileCacheLine   = regexp.MustCompile(`Using cache directory: (\S+) for vLLM's torch\.compile`)
	compileCacheOff    = regexp.MustCompile(`vLLM's torch\.compile cache is disabled\.`)
	moeBackendLine     = regexp.MustCompile(`Using '?([A-Za-z0-9_.\- ]+?)'? ([A-Za-z0-9]+) MoE backend out of potential backends`)
	gitSHA             = regexp.MustCompile(`^(.*?) \(git sha: ([0-9a-f]+)`)
	compileCacheKeyDir = "torch_compile_cache"
)

// compileKey is the key of a cache directory: the path component after
// torch_compile_cache; "" when there is none.
func compileKey(dir string) string {
	parts := strings.Split(filepath.ToSlash(dir), "/")
	for i, p := range parts {
		if p == compileCacheKeyDir && i+1 < len(parts) && parts[i+1] != "" {
			return parts[i+1]
		}
	}
	return ""
}

// readServerLogs scans the server's output files for the compile cache
// and MoE backend lines; a file that is absent adds nothing.
func readServerLogs(r *RunRecords, paths []string) error {
	keys, dirs := map[string]bool{}, map[string]bool{}
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := compileCacheLine.FindStringSubmatch(line); m != nil {
				dirs[m[1]] = true
				if k := compileKey(m[1]); k != "" {
					keys[k] = true
				}
			} else if compileCacheOff.MatchString(line) {
				keys["disabled"], dirs["disabled"] = true, true
			}
			if m := moeBackendLine.FindStringSubmatch(line); m != nil && r.MoEBackend == Unknown {
				r.MoEBackend, r.MoEQuant = m[1], m[2]
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
	}
	r.CompileCacheKeys = slices.Sorted(maps.Keys(keys))
	r.CompileCacheDirs = slices.Sorted(maps.Keys(dirs))
	return nil
}

// readServerVersion reads system_env.vllm_version of server-config.json.
func readServerVersion(r *RunRecords, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var doc struct {
		SystemEnv struct {
			VLLMVersion string `json:"vllm_version"`
		} `json:"system_env"`
	}
	if json.Unmarshal(b, &doc) != nil || doc.SystemEnv.VLLMVersion == "" {
		return
	}
	v := doc.SystemEnv.VLLMVersion
	r.ServerVersion = v
	if m := gitSHA.FindStringSubmatch(v); m != nil {
		r.ServerVersion, r.SourceCommit = m[1], m[2]
	}
}

// RecordsOptions say where the records are read and written.
type RecordsOptions struct {
	AttemptDir  string // server.out, server.err, server-config.json
	CampaignDir string // provenance/SHA256SUMS: the model's shards
	Out         string // records.json ("" or "-": not written)
	// CompileKeyOf, when set, is a run directory (the burn-in of the same
	// server configuration) whose latest attempt's records.json holds the
	// compile-cache key this run must share (seed 002, stop condition 1:
	// "a per-run output directory changes the compile-cache key").
	CompileKeyOf string
}

// ReadRecords gathers the run's records.
func ReadRecords(o RecordsOptions) (RunRecords, error) {
	r := RunRecords{Schema: RecordsSchema, MoEBackend: Unknown, MoEQuant: Unknown, ServerVersion: Unknown, SourceCommit: Unknown,
		CompileCacheKeys: []string{}, CompileCacheDirs: []string{}, ModelShards: []ShardRecord{}, Unknown: []string{}}
	if err := readServerLogs(&r, []string{filepath.Join(o.AttemptDir, "server.out"), filepath.Join(o.AttemptDir, "server.err")}); err != nil {
		return r, err
	}
	readServerVersion(&r, filepath.Join(o.AttemptDir, "server-config.json"))
	if o.CampaignDir != "" {
		ents, err := provenance.Read(o.CampaignDir)
		if err != nil {
			return r, err
		}
		for _, e := range ents {
			if e.Shard {
				r.ModelShards = append(r.ModelShards, ShardRecord{Path: e.Path, SHA256: e.SHA256, Size: e.Size})
			}
		}
	}
	for name, missing := range map[string]bool{
		"compile_cache_keys": len(r.CompileCacheKeys) == 0, "compile_cache_dirs": len(r.CompileCacheDirs) == 0,
		"moe_backend": r.MoEBackend == Unknown, "moe_quant": r.MoEQuant == Unknown, "server_version": r.ServerVersion == Unknown,
		"source_commit": r.SourceCommit == Unknown, "model_shards": len(r.ModelShards) == 0,
	} {
		if missing {
			r.Unknown = append(r.Unknown, name)
		}
	}
	sort.Strings(r.Unknown)
	return r, nil
}

// latestRecords reads records.json of the latest attempt (aN, the
// highest N that has one) of a run directory.
func latestRecords(runDir string) (RunRecords, string, error) {
	ms, _ := filepath.Glob(filepath.Join(runDir, "a*", "records.json"))
	best, bestN := "", -1
	for _, m := range ms {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(m)), "a%d", &n); err == nil && n > bestN {
			best, bestN = m, n
		}
	}
	var r RunRecords
	if best == "" {
		return r, "", fmt.Errorf("no attempt of %s has a records.json: the compile-cache key to share cannot be read", runDir)
	}
	b, err := os.ReadFile(best)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, best, err
}

// Records gathers the run's records, writes them to o.Out, and, with
// o.CompileKeyOf, checks that the run's compile-cache keys are the
// reference run's. Unknown records pass (they are recorded as such, and
// the detail names them); keys that differ fail; keys that cannot be
// compared (either side unknown, no reference) are an error. Figures
// records_unknown, model_shards, and with a reference compile_key_matches
// (0/1).
func Records(o RecordsOptions) Result {
	f := newFindings()
	r, err := ReadRecords(o)
	if err != nil {
		f.errorf("records: %v", err)
		return f.result("")
	}
	f.fig("records_unknown", float64(len(r.Unknown)))
	f.fig("model_shards", float64(len(r.ModelShards)))
	if len(r.Unknown) > 0 {
		f.notef("recorded as unknown (the server did not expose them): %s", strings.Join(r.Unknown, ", "))
	}
	if o.Out != "" && o.Out != "-" {
		if err := atomicfile.WriteJSON(o.Out, r, 0o644); err != nil {
			f.errorf("write %s: %v", o.Out, err)
		}
	}
	if o.CompileKeyOf != "" {
		ref, at, err := latestRecords(o.CompileKeyOf)
		switch {
		case err != nil:
			f.errorf("compile_cache_key: %v", err)
		case len(r.CompileCacheKeys) == 0 || len(ref.CompileCacheKeys) == 0:
			f.errorf("compile_cache_key: unknown here (%v) or in %s (%v): whether a per-run directory changed it cannot be told", r.CompileCacheKeys, at, ref.CompileCacheKeys)
		case !slices.Equal(r.CompileCacheKeys, ref.CompileCacheKeys):
			f.fig("compile_key_matches", 0)
			f.failf("compile_cache_key: this run's compile-cache key %v is not %v of %s: a per-run setting changed it (stop condition 1)", r.CompileCacheKeys, ref.CompileCacheKeys, at)
		default:
			f.fig("compile_key_matches", 1)
		}
	}
	return f.result(fmt.Sprintf("compile cache %v, MoE backend %s, server %s at %s, %d model shard(s)", r.CompileCacheKeys, r.MoEBackend, r.ServerVersion, r.SourceCommit, len(r.ModelShards)))
}
