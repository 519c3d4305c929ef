package main

import (
	"net/http"
	"os"
	"strings"
)

// serverInfo is the effective configuration the stand-in reports, in the
// shape of the server kind it follows (kinds.go):
//   - vLLM's GET /server_info?config_format=json: {"vllm_config":
//     {"scheduler_config": {...}, "parallel_config": {...}, ...},
//     "vllm_env": {...}, "system_env": {...}};
//   - SGLang's GET /server_info and its deprecated alias GET
//     /get_server_info: the server arguments at the top level
//     (max_running_requests null unless given, chunked_prefill_size,
//     tp_size, ...), "internal_states" (the scheduler's, with
//     effective_max_running_requests_per_dp) and "version".
//
// It reports what it was started with unless told to misreport
// (--report-max-num-seqs), so the effective-config gate can be tested.
type serverInfo struct {
	maxNumSeqs          int
	maxNumBatchedTokens int
	reportMaxNumSeqs    int // < 0: report maxNumSeqs
}

func (si serverInfo) reported() int {
	if si.reportMaxNumSeqs >= 0 {
		return si.reportMaxNumSeqs
	}
	return si.maxNumSeqs
}

func (si serverInfo) tp() int {
	if v := os.Getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		return len(strings.Split(v, ","))
	}
	return 1
}

func (si serverInfo) register(mux *http.ServeMux, model string, kind kindConfig) {
	if kind.kind == kindSGLangOmni {
		// SGLang-Omni's routes (openai_api.py) report no server
		// configuration: its effective configuration is its launch
		// arguments and startup log.
		return
	}
	if kind.sglang() {
		h := func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, si.sglang(model, kind)) }
		mux.HandleFunc("GET /server_info", h)
		mux.HandleFunc("GET /get_server_info", h)
		return
	}
	mux.HandleFunc("GET /server_info", func(w http.ResponseWriter, r *http.Request) {
		var cfg any = "VllmConfig(max_num_seqs=...)" // config_format=text
		if r.URL.Query().Get("config_format") == "json" {
			cfg = map[string]any{
				"model_config": map[string]any{"model": model, "dtype": "torch.bfloat16"},
				"scheduler_config": map[string]any{
					"max_num_seqs": si.reported(), "max_num_batched_tokens": si.maxNumBatchedTokens,
					"enable_chunked_prefill": true,
				},
				"parallel_config": map[string]any{"tensor_parallel_size": si.tp(), "pipeline_parallel_size": 1},
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"vllm_config": cfg, "vllm_env": map[string]any{}, "system_env": map[string]any{}})
	})
}

// sglang is SGLang's server-info document: max_running_requests as given
// on the command line (null when not), the scheduler's effective value in
// internal_states, one entry per DP rank.
func (si serverInfo) sglang(model string, kind kindConfig) map[string]any {
	var given any // JSON null
	eff := si.reported()
	if kind.maxRunningRequests >= 0 {
		given = kind.maxRunningRequests
		if si.reportMaxNumSeqs < 0 {
			eff = kind.maxRunningRequests
		}
	}
	return map[string]any{
		"model_path": model, "max_running_requests": given, "chunked_prefill_size": si.maxNumBatchedTokens,
		"tp_size": si.tp(), "dp_size": 1,
		"internal_states": []any{map[string]any{
			"effective_max_running_requests_per_dp": eff, "last_gen_throughput": 0.0,
		}},
		"version": "standin",
	}
}
