package gates

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// SGLang's /server_info as it is served: max_running_requests as given
// (null without the flag), the effective value in internal_states.
func TestServerConfigSGLangEffective(t *testing.T) {
	doc := `{"max_running_requests": null, "chunked_prefill_size": 8192, "tp_size": 1,
	  "internal_states": [{"effective_max_running_requests_per_dp": 1024, "last_gen_throughput": 0}], "version": "0.5.18"}`
	ex := func(path, equals string) []ConfigExpect {
		return []ConfigExpect{{Name: "mrr", Path: path, Equals: json.RawMessage(equals)}}
	}
	now := time.Now()
	for _, path := range []string{"internal_states.0.effective_max_running_requests_per_dp", "internal_states[0].effective_max_running_requests_per_dp"} {
		if v := ServerConfig([]byte(doc), ex(path, "1024"), now); v.Verdict != Pass || v.Figures["mrr"] != 1024 {
			t.Fatalf("%s: %+v", path, v)
		}
	}
	v := ServerConfig([]byte(doc), ex("max_running_requests", "1024"), now)
	if v.Verdict != Fail || !strings.Contains(v.Detail, "is null, want 1024") || !strings.Contains(v.Detail, "internal_states.0.effective_max_running_requests_per_dp") {
		t.Fatalf("null field: %+v", v)
	}
	if v := ServerConfig([]byte(doc), ex("internal_states[1].x", "1"), now); v.Verdict != Fail || !strings.Contains(v.Detail, "list of 1") {
		t.Fatalf("index past the end: %+v", v)
	}
}
