package contract

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"warden/pkg/provenance"
)

// vLLM's startup lines as the cited source writes them (docs/servers.md,
// "What a run records"), and /server_info's system_env of a build from a
// git checkout.
const (
	vllmCacheLine = `(EngineCore pid=129) INFO 07-01 04:24:18 [backends.py:1089] Using cache directory: /root/.cache/vllm/torch_compile_cache/41b7c9b698/rank_0_0/backbone for vLLM's torch.compile`
	vllmMoELine   = `(EngineCore pid=129) INFO 07-01 04:23:59 [unquantized.py:301] Using TRITON Unquantized MoE backend out of potential backends: ['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON', 'BATCHED_TRITON'].`
	serverInfo    = `{"vllm_config": {}, "vllm_env": {}, "system_env": {"vllm_version": "0.24.1.dev7+g23450fb21 (git sha: 23450fb21)"}}`
)

// recordsRun writes a run directory with one attempt whose server printed
// log and served info, and returns the attempt directory.
func recordsRun(t *testing.T, root, run, log, info string) string {
	t.Helper()
	a := filepath.Join(root, "runs", run, "a1")
	if err := os.MkdirAll(a, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(a, "server.out"), []byte(log), 0o644)
	if info != "" {
		os.WriteFile(filepath.Join(a, "server-config.json"), []byte(info), 0o644)
	}
	return a
}

// TestRecords: the compile cache key and directory, the MoE backend, the
// server's version and source commit and the model's shards are read
// from where vLLM exposes them and the campaign recorded them; what is
// missing is recorded unknown, never absent; a run whose compile-cache
// key is not its burn-in's fails, naming stop condition 1.
func TestRecords(t *testing.T) {
	root := t.TempDir()
	model := filepath.Join(root, "model")
	os.MkdirAll(model, 0o755)
	os.WriteFile(filepath.Join(model, "model-00001-of-00001.safetensors"), []byte("w"), 0o644)
	shards, err := provenance.Shards(model, "*.safetensors", "model", false)
	if err != nil {
		t.Fatal(err)
	}
	hashed, err := provenance.Record(root, shards, provenance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	burnin := recordsRun(t, root, "burnin.C00", vllmMoELine+"\n"+vllmCacheLine+"\n", serverInfo)
	if r := Records(RecordsOptions{AttemptDir: burnin, CampaignDir: root, Out: filepath.Join(burnin, "records.json")}); r.Verdict != "pass" || r.Figures["records_unknown"] != 0 {
		t.Fatalf("burn-in: %s %q %v", r.Verdict, r.Detail, r.Figures)
	}
	var rec RunRecords
	b, _ := os.ReadFile(filepath.Join(burnin, "records.json"))
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.CompileCacheKeys, []string{"41b7c9b698"}) || rec.CompileCacheDirs[0] != "/root/.cache/vllm/torch_compile_cache/41b7c9b698/rank_0_0/backbone" ||
		rec.MoEBackend != "TRITON" || rec.MoEQuant != "Unquantized" || rec.ServerVersion != "0.24.1.dev7+g23450fb21" || rec.SourceCommit != "23450fb21" ||
		len(rec.ModelShards) != 1 || rec.ModelShards[0].SHA256 != hashed[0].SHA256 || rec.ModelShards[0].Size != 1 {
		t.Fatalf("records %+v", rec)
	}

	same := recordsRun(t, root, "P01.C00.saturation", vllmCacheLine+"\n", "")
	r := Records(RecordsOptions{AttemptDir: same, CampaignDir: root, Out: filepath.Join(same, "records.json"), CompileKeyOf: filepath.Join(root, "runs", "burnin.C00")})
	if r.Verdict != "pass" || r.Figures["compile_key_matches"] != 1 || !strings.Contains(r.Detail, "recorded as unknown (the server did not expose them): moe_backend, moe_quant, server_version, source_commit") {
		t.Fatalf("same key: %s %q %v", r.Verdict, r.Detail, r.Figures)
	}
	b, _ = os.ReadFile(filepath.Join(same, "records.json"))
	if !strings.Contains(string(b), `"moe_backend": "unknown"`) || !strings.Contains(string(b), `"source_commit": "unknown"`) {
		t.Fatalf("unknown records absent: %s", b)
	}

	other := recordsRun(t, root, "P02.C00.saturation", strings.Replace(vllmCacheLine, "41b7c9b698", "0a1b2c3d4e", 1)+"\n", "")
	r = Records(RecordsOptions{AttemptDir: other, Out: "-", CompileKeyOf: filepath.Join(root, "runs", "burnin.C00")})
	if r.Verdict != "fail" || !strings.Contains(r.Detail, "compile_cache_key: this run's compile-cache key [0a1b2c3d4e] is not [41b7c9b698]") || r.Figures["compile_key_matches"] != 0 {
		t.Fatalf("another key: %s %q", r.Verdict, r.Detail)
	}
	silent := recordsRun(t, root, "P03.C00.saturation", "", "")
	if r := Records(RecordsOptions{AttemptDir: silent, Out: "-", CompileKeyOf: filepath.Join(root, "runs", "burnin.C00")}); r.Verdict != "error" || !strings.Contains(r.Detail, "cannot be told") {
		t.Fatalf("no key logged: %s %q", r.Verdict, r.Detail)
	}
	if r := Records(RecordsOptions{AttemptDir: same, Out: "-", CompileKeyOf: filepath.Join(root, "runs", "burnin.C10")}); r.Verdict != "error" || !strings.Contains(r.Detail, "no attempt of") {
		t.Fatalf("no reference: %s %q", r.Verdict, r.Detail)
	}
	off := recordsRun(t, root, "P04.C00.saturation", "INFO [backends.py:1] vLLM's torch.compile cache is disabled.\n", "")
	if r, err := ReadRecords(RecordsOptions{AttemptDir: off}); err != nil || !slices.Equal(r.CompileCacheKeys, []string{"disabled"}) {
		t.Fatalf("cache off: %+v %v", r, err)
	}
}
