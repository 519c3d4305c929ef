package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxTokensLimit bounds one request's generation.
const maxTokensLimit = 1 << 16

// completionRequest is the part of an OpenAI completions request the
// stand-in reads. The prompt is only counted, never logged or stored.
type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	// IgnoreEOS is vLLM's extension; the stand-in never stops early, so it
	// always generates max_tokens tokens, with or without it.
	IgnoreEOS     bool `json:"ignore_eos"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// chatRequest is the part of an OpenAI chat completions request the
// stand-in reads. Messages are only counted, never logged or stored.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	IgnoreEOS           bool `json:"ignore_eos"`
	Stream              bool `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Modalities with "audio" asks an Omni kind for audio (audio.go).
	Modalities []string `json:"modalities"`
}

// chatDelta is the delta of a streamed chat chunk.
type chatDelta struct {
	Role             string `json:"role,omitempty"`
	Content          string `json:"content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`         // vLLM's reasoning text
	ReasoningContent string `json:"reasoning_content,omitempty"` // SGLang's
}

type chatChoice struct {
	Index        int        `json:"index"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Message      *chatDelta `json:"message,omitempty"`
	FinishReason *string    `json:"finish_reason"`
}

// response is an OpenAI-style response or stream chunk whose choices are
// C: the generation's id, created time and model, the object kind, the
// choices and, where given, the usage.
type response[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

// respond is g's response of the object kind with choices (an empty
// list, never null, when none) and no usage.
func respond[C any](g generation, object string, choices []C) response[C] {
	return response[C]{ID: g.id, Object: object, Created: g.created, Model: g.model, Choices: choices}
}

type chatResponse = response[chatChoice]

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completionResponse = response[completionChoice]

// api serves the stand-in's HTTP endpoints.
type api struct {
	model string
	// tokenInterval is the time to "generate" one token.
	tokenInterval time.Duration
	// slots, when set, holds a slot per request generating: a request
	// waits (queued, in arrival order) for a free one, so the server
	// completes at most cap(slots) / (tokens x tokenInterval) requests
	// a second, a known capacity (--max-running).
	slots chan struct{}
	// healthy reports whether /health answers 200.
	healthy func() bool
	// inflight counts requests being handled, for the drain at shutdown.
	inflight inflight
	// info is the effective configuration it reports.
	info serverInfo
	// profiler writes Layer-2 traces (profiler.go); nil answers 200 and
	// writes nothing.
	profiler *profiler
	// kind is how the API differs by server kind (kinds.go).
	kind kindConfig
	// running is /metrics' gauge (metrics.go).
	running runningGauge
}

func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", a.health)
	mux.HandleFunc("GET /v1/models", a.models)
	mux.HandleFunc("POST /v1/completions", a.running.track(a.completions))
	mux.HandleFunc("POST /v1/chat/completions", a.running.track(a.chatCompletions))
	mux.HandleFunc("GET /metrics", a.metrics)
	a.info.register(mux, a.model, a.kind)
	mux.HandleFunc("POST /start_profile", a.startProfile)
	mux.HandleFunc("POST /stop_profile", a.stopProfile)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.inflight.begin() {
			writeError(w, http.StatusServiceUnavailable, "server is shutting down")
			return
		}
		defer a.inflight.end()
		mux.ServeHTTP(w, r)
	})
}

func (a *api) health(w http.ResponseWriter, _ *http.Request) {
	if !a.healthy() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *api) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": a.model, "object": "model", "owned_by": "standin", "created": time.Now().Unix(),
		}},
	})
}

func (a *api) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !a.admit(w, r, &req, &req.Model, "request body is not a completions request", nil) {
		return
	}
	maxTokens, ok := askedTokens(w, req.MaxTokens)
	if !ok {
		return
	}
	promptTokens, ok := countPromptTokens(req.Prompt)
	if !ok {
		writeError(w, http.StatusBadRequest, "prompt must be a string or an array")
		return
	}
	gen := a.generation("cmpl", promptTokens, maxTokens)
	if req.Stream {
		a.stream(r.Context(), w, gen, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	text, err := a.generateText(r.Context(), gen.max)
	if err != nil {
		return // the client or the server went away
	}
	writeJSON(w, http.StatusOK, gen.response(text, true, true))
}

// chatCompletions answers /v1/chat/completions: the prompt is the words
// of the messages' contents; the reply is max_tokens (or
// max_completion_tokens) placeholder tokens, streamed as chat deltas when
// asked, with a final usage chunk under stream_options.include_usage.
func (a *api) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !a.admit(w, r, &req, &req.Model, "request body is not a chat completions request", func() bool { return len(req.Messages) > 0 }) {
		return
	}
	maxTokens, ok := askedTokens(w, req.MaxCompletionTokens, req.MaxTokens)
	if !ok {
		return
	}
	promptTokens := 0
	for _, m := range req.Messages {
		var s string
		if err := json.Unmarshal(m.Content, &s); err != nil {
			writeError(w, http.StatusBadRequest, "message content must be a string")
			return
		}
		promptTokens += len(strings.Fields(s))
	}
	gen := a.generation("chatcmpl", promptTokens, maxTokens)
	if !req.Stream {
		text, err := a.generateText(r.Context(), gen.max)
		if err != nil {
			return
		}
		if a.kind.wantsAudio(req) {
			a.chatAudioFull(w, gen, text)
			return
		}
		reason := "length"
		resp := respond(gen, "chat.completion", []chatChoice{{Message: &chatDelta{Role: "assistant", Content: text}, FinishReason: &reason}})
		resp.Usage = gen.usage()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if a.kind.wantsAudio(req) {
		a.chatAudioStream(w, r, gen, includeUsage)
		return
	}
	chunk := func(choices []chatChoice) chatResponse {
		return respond(gen, "chat.completion.chunk", choices)
	}
	send := a.sseStart(w)
	// vLLM's first chat chunk carries the role and no content.
	if send(chunk([]chatChoice{{Delta: &chatDelta{Role: "assistant"}}})) != nil {
		return
	}
	onFinish := a.kind.usageOnFinish()
	err := a.generate(r.Context(), gen.max, func(i int) error {
		if err := a.midstreamError(i, send); err != nil {
			return err
		}
		c := chunk([]chatChoice{{Delta: a.kind.delta(i)}})
		if i == gen.max-1 && !onFinish {
			reason := "length"
			c.Choices[0].FinishReason = &reason
		}
		return send(c)
	})
	if errors.Is(err, errMidstream) {
		_ = send(nil)
		return
	}
	if err != nil {
		return
	}
	if onFinish {
		// SGLang-Omni: a finish chunk of its own, an empty delta with the
		// finish reason and the usage (where the pipeline gave one),
		// whatever stream_options said
		reason := "length"
		last := chunk([]chatChoice{{Delta: &chatDelta{}, FinishReason: &reason}})
		last.Usage = a.kind.usage(gen)
		if send(last) != nil {
			return
		}
	}
	if includeUsage && !onFinish && !a.kind.noUsage {
		last := chunk([]chatChoice{})
		last.Usage = gen.usage()
		if send(last) != nil {
			return
		}
	}
	_ = send(nil)
}

// sseStart writes the headers of a server-sent event stream and returns a
// function that sends one event (v as JSON), or "[DONE]" when v is nil.
func (a *api) sseStart(w http.ResponseWriter) func(v any) error {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return func(v any) error {
		data := []byte("[DONE]")
		if v != nil {
			var err error
			if data, err = json.Marshal(v); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return err
		}
		return rc.Flush()
	}
}

// stream sends one server-sent event per token, then "[DONE]".
func (a *api) stream(ctx context.Context, w http.ResponseWriter, gen generation, includeUsage bool) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return err
		}
		return rc.Flush()
	}
	err := a.generate(ctx, gen.max, func(i int) error {
		if err := a.midstreamError(i, send); err != nil {
			return err
		}
		resp := gen.response(token(i), i == gen.max-1, false)
		return send(resp)
	})
	if errors.Is(err, errMidstream) {
		if _, err := fmt.Fprint(w, "data: [DONE]\n\n"); err == nil {
			_ = rc.Flush()
		}
		return
	}
	if err != nil {
		return
	}
	if includeUsage && !a.kind.noUsage {
		resp := gen.response("", false, true)
		resp.Choices = []completionChoice{}
		if err := send(resp); err != nil {
			return
		}
	}
	if _, err := fmt.Fprint(w, "data: [DONE]\n\n"); err == nil {
		_ = rc.Flush()
	}
}

// generate calls emit for each of n tokens, one every tokenInterval. It
// stops early with the context's error.
func (a *api) generate(ctx context.Context, n int, emit func(i int) error) error {
	if err := serverStall.hold(ctx); err != nil {
		return err
	}
	if a.slots != nil {
		select {
		case a.slots <- struct{}{}:
			defer func() { <-a.slots }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var tick <-chan time.Time
	if a.tokenInterval > 0 {
		t := time.NewTicker(a.tokenInterval)
		defer t.Stop()
		tick = t.C
	}
	for i := 0; i < n; i++ {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				return ctx.Err()
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		if err := emit(i); err != nil {
			return err
		}
		a.running.step()
	}
	return nil
}

// generation describes one completion being produced.
type generation struct {
	id      string
	created int64
	model   string
	prompt  int
	max     int
}

// generation is a new generation of max tokens for a prompt of prompt
// tokens, its id kind-standin-NANOSECONDS.
func (a *api) generation(kind string, prompt, max int) generation {
	now := time.Now()
	return generation{id: fmt.Sprintf("%s-standin-%d", kind, now.UnixNano()), created: now.Unix(), model: a.model, prompt: prompt, max: max}
}

func (g generation) response(text string, last, withUsage bool) completionResponse {
	choice := completionChoice{Text: text}
	if last {
		reason := "length"
		choice.FinishReason = &reason
	}
	resp := respond(g, "text_completion", []completionChoice{choice})
	if withUsage {
		resp.Usage = g.usage()
	}
	return resp
}

// usage is the generation's token counts: it always produces exactly max
// tokens, as vLLM does with ignore_eos.
func (g generation) usage() *usage {
	return &usage{PromptTokens: g.prompt, CompletionTokens: g.max, TotalTokens: g.prompt + g.max}
}

// token returns the placeholder text of the i-th generated token.
func token(i int) string {
	return fmt.Sprintf(" tok%d", i)
}

// countPromptTokens counts a string prompt's words, or an array prompt's
// elements (token ids or strings).
func countPromptTokens(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 {
		return 0, true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return len(strings.Fields(s)), true
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err == nil {
		return len(arr), true
	}
	return 0, false
}

// admit answers a generation request the stand-in does not take: the
// model still loading, a body that does not decode into req or that valid
// (when not nil) refuses (bad is then the message), or another model than
// the served one (model points at req's field). It returns whether to go on.
func (a *api) admit(w http.ResponseWriter, r *http.Request, req any, model *string, bad string, valid func() bool) bool {
	if !a.healthy() {
		writeError(w, http.StatusServiceUnavailable, "model is loading")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20))
	if err := dec.Decode(req); err != nil || valid != nil && !valid() {
		writeError(w, http.StatusBadRequest, bad)
		return false
	}
	if *model != "" && *model != a.model && a.kind.servedModelCheck {
		a.kind.modelNotFound(w, *model)
		return false
	}
	return true
}

// modelNotFound answers a request for a model the server does not serve,
// in the kind's shape: SGLang-Omni's resolve_served_model (404,
// invalid_request_error, param model, code model_not_found), else vLLM's
// _check_model (404 NotFoundError). Never the prompt.
func (k kindConfig) modelNotFound(w http.ResponseWriter, model string) {
	if k.kind == kindSGLangOmni {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("The model %q does not exist.", model), "type": "invalid_request_error", "param": "model", "code": "model_not_found",
		}})
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("The model `%s` does not exist.", model), "type": "NotFoundError", "param": "model", "code": http.StatusNotFound,
	}})
}

// errMidstream ends a stream's generation after its error event.
var errMidstream = errors.New("stream ended by its error event")

// midstreamError sends, once a stream has sent --midstream-error-after
// tokens, vLLM's in-stream error event: the error response's JSON with
// the HTTP status as its code (create_streaming_error_response), and
// returns errMidstream; nil before then or without the switch.
func (a *api) midstreamError(i int, send func(any) error) error {
	k := a.kind
	if k.midstreamStatus == 0 || i < k.midstreamAfter {
		return nil
	}
	typ := "BadRequestError"
	if k.midstreamStatus >= 500 {
		typ = "InternalServerError"
	}
	ev := map[string]any{"error": map[string]any{
		"message": "This model's maximum context length is exceeded (stand-in)", "type": typ, "param": nil, "code": k.midstreamStatus,
	}}
	if err := send(ev); err != nil {
		return err
	}
	return errMidstream
}

// askedTokens is the number of tokens a request asks for: the first of
// asked that is set, or 16. Outside 1..maxTokensLimit it answers 400 and
// returns false.
func askedTokens(w http.ResponseWriter, asked ...*int) (int, bool) {
	n := 16
	for _, p := range asked {
		if p != nil {
			n = *p
			break
		}
	}
	if n < 1 || n > maxTokensLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("max_tokens must be between 1 and %d", maxTokensLimit))
		return 0, false
	}
	return n, true
}

// generateText generates n tokens and returns their text, or the error
// that ended the generation (the client or the server went away).
func (a *api) generateText(ctx context.Context, n int) (string, error) {
	var text strings.Builder
	err := a.generate(ctx, n, func(i int) error {
		text.WriteString(token(i))
		return nil
	})
	return text.String(), err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers in the shape of OpenAI errors. Messages never quote
// the request's prompt.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": msg, "type": http.StatusText(status), "code": status},
	})
}

// inflight counts requests being handled. Once closed it admits no more,
// and idle reports when the last one has ended.
type inflight struct {
	mu     sync.Mutex
	n      int           // guarded by mu
	closed bool          // guarded by mu
	idle   chan struct{} // guarded by mu; closed when closed and n == 0
}

func (f *inflight) begin() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.n++
	return true
}

func (f *inflight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.closed && f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// close admits no more requests and returns a channel closed when none is
// in flight.
func (f *inflight) close() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	idle := make(chan struct{})
	if f.n == 0 {
		close(idle)
	} else {
		f.idle = idle
	}
	return idle
}
