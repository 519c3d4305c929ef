package main

import (
	"net/http"
	"os"
	"strings"
)

// serverInfo is the effective configuration the stand-in reports, in the
// shapes of the real servers' endpoints:
//   - vLLM's GET /server_info?config_format=json: {"vllm_config":
//     {"scheduler_config": {...}, "parallel_config": {...}, ...},
//     "vllm_env": {...}, "system_env": {...}};
//   - SGLang's GET /get_server_info: the server arguments at the top
//     level (max_running_requests, chunked_prefill_size, tp_size, ...),
//     "internal_states" and "version".
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

func (si serverInfo) register(mux *http.ServeMux, model string) {
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
	mux.HandleFunc("GET /get_server_info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"model_path": model, "max_running_requests": si.reported(), "chunked_prefill_size": si.maxNumBatchedTokens,
			"tp_size": si.tp(), "internal_states": []any{map[string]any{}}, "version": "standin",
		})
	})
}
