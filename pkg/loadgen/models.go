package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// checkServedModel reads the server's GET /v1/models (OpenAI's list:
// {"data": [{"id": ...}, ...]}, which vLLM, vLLM-Omni and SGLang-Omni
// serve) and returns its ids when the run's model is among them; else
// ErrModelNotServed, saying what the server serves. A list that cannot be
// read refuses the run too: it cannot tell.
func (r *run) checkServedModel(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fail := func(why string) ([]string, error) {
		return nil, fmt.Errorf("%w: GET /v1/models: %s", ErrModelNotServed, why)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.BaseURL+"/v1/models", http.NoBody)
	if err != nil {
		return fail("build request")
	}
	resp, err := r.sender.client.Do(req)
	if err != nil {
		return fail(errKind(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail("status " + strconv.Itoa(resp.StatusCode))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return fail("not a model list")
	}
	ids := make([]string, 0, len(list.Data))
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	if !slices.Contains(ids, r.cfg.Model) {
		return nil, fmt.Errorf("%w: the run sends %q, /v1/models lists %q", ErrModelNotServed, r.cfg.Model, ids)
	}
	return ids, nil
}
