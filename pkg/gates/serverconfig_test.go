package gates

import (
	"encoding/json"
	"testing"
	"time"
)

func TestServerConfig(t *testing.T) {
	now := time.Now()
	vllm := `{"vllm_config": {"scheduler_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "enable_chunked_prefill": true},
	  "parallel_config": {"tensor_parallel_size": 1}, "model_config": {"dtype": "torch.bfloat16"}}, "vllm_env": {}, "system_env": {}}`
	sglang := `{"max_running_requests": 64, "chunked_prefill_size": 2048, "tp_size": 2, "internal_states": [{"x": 1}], "version": "0.5.0"}`
	ex := func(name, path, equals string) ConfigExpect {
		return ConfigExpect{Name: name, Path: path, Equals: json.RawMessage(equals)}
	}
	cases := []struct {
		name    string
		doc     string
		expects []ConfigExpect
		verdict string
		detail  []string
		figures map[string]float64
	}{
		{"vLLM defaults hold", vllm, []ConfigExpect{
			ex("max_num_seqs", "vllm_config.scheduler_config.max_num_seqs", "1024"),
			ex("max_num_batched_tokens", "vllm_config.scheduler_config.max_num_batched_tokens", "8192.0"),
			ex("chunked", "vllm_config.scheduler_config.enable_chunked_prefill", "true"),
			ex("dtype", "vllm_config.model_config.dtype", `"torch.bfloat16"`)},
			Pass, nil, map[string]float64{"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "matched": 4}},
		{"a changed default is a mismatch", vllm, []ConfigExpect{ex("max_num_seqs", "vllm_config.scheduler_config.max_num_seqs", "256")},
			Fail, []string{"max_num_seqs", "is 1024, want 256"}, map[string]float64{"max_num_seqs": 1024, "matched": 0}},
		{"a missing field fails", vllm, []ConfigExpect{ex("x", "vllm_config.scheduler_config.max_seqs", "1")},
			Fail, []string{`no "max_seqs"`}, nil},
		{"SGLang, with an array index", sglang, []ConfigExpect{ex("mrr", "max_running_requests", "64"), ex("tp", "tp_size", "2"), ex("state", "internal_states.0.x", "1")},
			Pass, nil, map[string]float64{"mrr": 64, "tp": 2, "matched": 3}},
		{"an index past the end", sglang, []ConfigExpect{ex("state", "internal_states.3.x", "1")}, Fail, []string{"list of 1"}, nil},
		{"a string is not its number", sglang, []ConfigExpect{ex("v", "version", "0.5")}, Fail, []string{`is "0.5.0", want 0.5`}, nil},
		{"not JSON is an error", "<html>404</html>", []ConfigExpect{ex("x", "a", "1")}, Error, []string{"not JSON"}, nil},
		{"not an object is an error", "[1,2]", []ConfigExpect{ex("x", "a", "1")}, Error, []string{"not a JSON object"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := ServerConfig([]byte(tc.doc), tc.expects, now)
			if v.Verdict != tc.verdict || v.Gate != "effective-config" {
				t.Fatalf("verdict %s (%s), want %s", v.Verdict, v.Detail, tc.verdict)
			}
			checkDetail(t, v.Detail, tc.detail, nil)
			for k, want := range tc.figures {
				if v.Figures[k] != want {
					t.Errorf("figure %s = %v, want %v", k, v.Figures[k], want)
				}
			}
		})
	}
}
