package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"

	"github.com/spf13/cobra"
)

// Hostile streams and profiler answers: what a broken server sends that a
// load client must never count as a success. They apply to streamed
// POST /v1/completions and to the profiler endpoints.

// Stream breaks (--stream-break), each a way a 200 stream can end with
// [DONE] and still not be a correct completion.
const (
	sBreakNoTokens    = "no-tokens"    // every chunk's text is empty; usage claims max_tokens
	sBreakNotJSON     = "not-json"     // token chunks are bare text, not JSON
	sBreakExtraChunk  = "extra-chunk"  // max_tokens+1 token chunks; usage claims max_tokens
	sBreakPromptCount = "prompt-count" // usage's prompt_tokens one more than the prompt's
	sBreakNegative    = "negative"     // usage's prompt_tokens is -1
)

var streamBreaks = []string{sBreakNoTokens, sBreakNotJSON, sBreakExtraChunk, sBreakPromptCount, sBreakNegative}

// misbehaveConfig holds the switches of this file.
type misbehaveConfig struct {
	// endless: every streamed completion sends a token every --token-ms
	// and never ends (until the client or the server goes away).
	endless bool
	// endlessFile: streams begun once this file exists are endless.
	endlessFile string
	streamBreak string
	// startProfileStatus and stopProfileStatus, when not 0, are what
	// /start_profile and /stop_profile answer instead of 200.
	startProfileStatus, stopProfileStatus int
}

func bindMisbehave(cmd *cobra.Command, c *misbehaveConfig) {
	f := cmd.Flags()
	f.BoolVar(&c.endless, "endless-streams", false, "misbehave: streamed completions send a token every --token-ms forever and never end")
	f.StringVar(&c.endlessFile, "endless-after-file", "", "misbehave: streamed completions begun once this file exists never end")
	f.StringVar(&c.streamBreak, "stream-break", "", "misbehave: break every streamed completion: no-tokens, not-json, extra-chunk, prompt-count, negative")
	f.IntVar(&c.startProfileStatus, "start-profile-status", 0, "misbehave: /start_profile answers this HTTP status (0: 200)")
	f.IntVar(&c.stopProfileStatus, "stop-profile-status", 0, "misbehave: /stop_profile answers this HTTP status (0: 200)")
}

func (c misbehaveConfig) validate() error {
	if c.streamBreak != "" && !slices.Contains(streamBreaks, c.streamBreak) {
		return fmt.Errorf("--stream-break %q: want one of %v", c.streamBreak, streamBreaks)
	}
	for _, s := range []int{c.startProfileStatus, c.stopProfileStatus} {
		if s != 0 && (s < 100 || s > 599) {
			return fmt.Errorf("profile status %d: want an HTTP status", s)
		}
	}
	return nil
}

// wrap returns next, or a handler that serves the switched endpoints
// itself and everything else with next.
func (c misbehaveConfig) wrap(a *api, next http.Handler) http.Handler {
	streams := c.endless || c.endlessFile != "" || c.streamBreak != ""
	if !streams && c.startProfileStatus == 0 && c.stopProfileStatus == 0 {
		return next
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	for path, status := range map[string]int{"POST /start_profile": c.startProfileStatus, "POST /stop_profile": c.stopProfileStatus} {
		if status != 0 {
			mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
				writeError(w, status, "profiler failed (--start-profile-status/--stop-profile-status)")
			})
		}
	}
	if streams {
		mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { c.completions(a, next, w, r) })
	}
	return mux
}

// completions serves a streamed completion with the switched behaviour;
// any other request goes to next, its body intact.
func (c misbehaveConfig) completions(a *api, next http.Handler, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "request body too large")
		return
	}
	var req completionRequest
	jsonErr := json.Unmarshal(body, &req)
	endless := c.endless
	if !endless && c.endlessFile != "" {
		_, statErr := os.Stat(c.endlessFile)
		endless = statErr == nil
	}
	promptTokens, ok := countPromptTokens(req.Prompt)
	maxTokens := 16
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if jsonErr != nil || !ok || !req.Stream || !a.healthy() || maxTokens < 1 || maxTokens > maxTokensLimit ||
		!endless && c.streamBreak == "" {
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
		return
	}
	gen := generation{id: "cmpl-standin-hostile", model: a.model, prompt: promptTokens, max: maxTokens}
	send := sseRaw(w)
	chunk := func(text string, last bool) []byte {
		b, _ := json.Marshal(gen.response(text, last, false))
		return b
	}
	if endless {
		// Ends only when the client or the server goes away.
		_ = a.generate(r.Context(), math.MaxInt, func(i int) error { return send(chunk(token(i), false)) })
		return
	}
	n := maxTokens
	if c.streamBreak == sBreakExtraChunk {
		n++
	}
	err = a.generate(r.Context(), n, func(i int) error {
		switch c.streamBreak {
		case sBreakNoTokens:
			return send(chunk("", i == n-1))
		case sBreakNotJSON:
			return send([]byte(token(i)))
		}
		return send(chunk(token(i), i == n-1))
	})
	if err != nil {
		return
	}
	u := gen.usage()
	switch c.streamBreak {
	case sBreakPromptCount:
		u.PromptTokens++
	case sBreakNegative:
		u.PromptTokens = -1
	}
	last := gen.response("", false, false)
	last.Choices, last.Usage = []completionChoice{}, u
	b, _ := json.Marshal(last)
	if send(b) == nil {
		_ = send([]byte("[DONE]"))
	}
}

// sseRaw writes the headers of an event stream and returns a function
// that sends one "data:" event of the given bytes, flushed.
func sseRaw(w http.ResponseWriter) func(data []byte) error {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return func(data []byte) error {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return err
		}
		return rc.Flush()
	}
}
