package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckServedModel: with CheckServedModel, a run whose model the
// server's /v1/models does not list is refused before anything is sent,
// saying what the server serves (SGLang-Omni serves its pipeline's name
// unless --model-name says otherwise, and answers 404 model_not_found to
// the model path); a list that cannot be read refuses it too; the served
// name passes and is recorded.
func TestCheckServedModel(t *testing.T) {
	// SGLang-Omni's ModelList (openai_api.py _register_models at 022b6a3d).
	list := `{"object":"list","data":[{"id":"qwen3-omni","object":"model","created":0,"owned_by":"sglang-omni","root":"qwen3-omni"}]}`
	for _, tc := range []struct {
		name, model, body string
		status            int
		want              string
	}{
		{"the model path", "/models/Qwen3-Omni", list, 200, `the run sends "/models/Qwen3-Omni", /v1/models lists ["qwen3-omni"]`},
		{"no list", "qwen3-omni", "", 404, "GET /v1/models: status 404"},
		{"not a list", "qwen3-omni", "[1]", 200, "not a model list"},
		{"the served name", "qwen3-omni", list, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent int
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			})
			mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, _ *http.Request) { sent++; sse(w, 4, 4, true) })
			srv := httptest.NewServer(mux)
			defer srv.Close()
			dir := t.TempDir()
			cfg := Config{BaseURL: srv.URL, Model: tc.model, Endpoint: Completions, LoadPoint: "check", MaxConcurrency: 1,
				CleanSegment: 100 * time.Millisecond, NumClean: 1, DrainTimeout: time.Second, ResultDir: dir, CheckServedModel: true}
			res, err := Run(context.Background(), cfg, smallManifest(t, 50))
			if errors.Is(err, ErrManifestExhausted) {
				err = nil // a closed loop against an instant server may use every row
			}
			if tc.want != "" {
				if !errors.Is(err, ErrModelNotServed) || !strings.Contains(err.Error(), tc.want) || sent != 0 {
					t.Fatalf("err %v, %d sent; want %q", err, sent, tc.want)
				}
				if _, err := os.Stat(filepath.Join(dir, "result.json")); err == nil {
					t.Fatal("a refused run wrote result.json")
				}
				return
			}
			if err != nil || !slices.Equal(res.ServedModels, []string{"qwen3-omni"}) || sent == 0 {
				t.Fatalf("err %v, served %v, %d sent", err, res.ServedModels, sent)
			}
		})
	}
}
