package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// sse writes a streamed completion of n tokens, with a usage chunk
// reporting usageTokens (none if negative), and [DONE] when done.
func sse(w http.ResponseWriter, n, usageTokens int, done bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" t%d\",\"finish_reason\":null}]}\n\n", i)
		w.(http.Flusher).Flush()
	}
	if usageTokens >= 0 {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\n", usageTokens)
	}
	if done {
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// testSenders are the two ways a sender carries requests to url, by
// name: "h1" on the client's own HTTP/1.1 connections (what a run against
// an http:// server uses), "net-http" through net/http's transport (an
// https server's).
func testSenders(t *testing.T, url string, clock *Clock) map[string]*sender {
	t.Helper()
	conns, ok := newH1Pool(url, 4)
	if !ok {
		t.Fatalf("%s: not an http:// URL", url)
	}
	tr := newTransport(4)
	t.Cleanup(func() { conns.closeIdle(); tr.CloseIdleConnections() })
	return map[string]*sender{
		"h1":       {client: newClient(tr), url: url, clock: clock, conns: conns},
		"net-http": {client: newClient(tr), url: url, clock: clock},
	}
}

// sendEach sends one request of fourTokens to url through each of
// testSenders and returns the outcomes by sender.
func sendEach(t *testing.T, url string) map[string]outcome {
	t.Helper()
	clock, _ := NewClock()
	out := map[string]outcome{}
	for name, s := range testSenders(t, url, clock) {
		out[name] = s.send(context.Background(), []byte(`{}`), fourTokens)
	}
	return out
}

const tokenChunk = `{"choices":[{"index":0,"text":" t","finish_reason":null}]}`

func usage(prompt, completion int) string {
	return fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, prompt, completion)
}

// raw streams each payload as one data line, then [DONE].
func raw(payloads ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, p := range payloads {
			fmt.Fprintf(w, "data: %s\n\n", p)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// TestSendTextPromptWithinParity: a text prompt's token count is the
// server's tokenizer's; within the seed's parity bound of one token of
// the manifest's it is recorded, never a failure; further apart the
// prompt cannot be the one sent, and the request is invalid-output with
// both counts. A token-id prompt's count must be exact.
func TestSendTextPromptWithinParity(t *testing.T) {
	for _, tc := range []struct {
		prompt int
		want   Class
		reason string
	}{
		{3, Success, ""}, {4, Success, ""}, {2, Success, ""},
		{5, InvalidOutput, "usage reports 5 prompt tokens, the manifest's input_tokens is 3 (more than 1 apart)"},
		{1, InvalidOutput, "usage reports 1 prompt tokens, the manifest's input_tokens is 3"},
	} {
		srv := httptest.NewServer(raw(tokenChunk, tokenChunk, tokenChunk, tokenChunk, usage(tc.prompt, 4)))
		clock, _ := NewClock()
		for name, s := range testSenders(t, srv.URL, clock) {
			if o := s.send(context.Background(), []byte(`{}`), expect{output: 4, exact: true, input: 3}); o.class != tc.want || o.promptTokens != tc.prompt || !strings.Contains(o.reason, tc.reason) {
				t.Fatalf("%s: %d prompt tokens: outcome %+v, want %s (%s)", name, tc.prompt, o, tc.want, tc.reason)
			}
			if o := s.send(context.Background(), []byte(`{}`), fourTokens); (o.class == Success) != (tc.prompt == 3) {
				t.Fatalf("%s: token-id prompt, %d prompt tokens: outcome %+v", name, tc.prompt, o)
			}
		}
		srv.Close()
	}
}

// TestSendImpossibleUsage: a usage claiming more output tokens than the
// request's max_tokens (10^12 for a 4-token request, 5x10^14 tokens/s)
// is invalid-output at the source, with or without --ignore-eos, and the
// reason gives both figures.
func TestSendImpossibleUsage(t *testing.T) {
	srv := httptest.NewServer(raw(tokenChunk, tokenChunk, tokenChunk, tokenChunk, usage(3, 1_000_000_000_000)))
	defer srv.Close()
	clock, _ := NewClock()
	for name, s := range testSenders(t, srv.URL, clock) {
		for _, e := range []expect{fourTokens, {output: 4, input: 3, inputExact: true}, {output: 4}} {
			o := s.send(context.Background(), []byte(`{}`), e)
			if o.class != InvalidOutput || o.reason != "usage reports 1000000000000 output tokens, above the request's max_tokens 4" {
				t.Fatalf("%s %+v: outcome %s %q", name, e, o.class, o.reason)
			}
		}
	}
}

func TestSendClassifiesEveryEnding(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    Class
		status  int
	}{
		{"success", func(w http.ResponseWriter, _ *http.Request) { sse(w, 4, 4, true) }, Success, 200},
		{"chunks longer than the reader", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(200)
			for i := 0; i < 4; i++ {
				fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"%s\"}]}\n\n", strings.Repeat("y", 5000))
			}
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
		}, Success, 200},
		{"too few tokens", func(w http.ResponseWriter, _ *http.Request) { sse(w, 3, 3, true) }, InvalidOutput, 200},
		{"no usage", func(w http.ResponseWriter, _ *http.Request) { sse(w, 4, -1, true) }, InvalidOutput, 200},
		{"partial stream", func(w http.ResponseWriter, _ *http.Request) { sse(w, 2, -1, false) }, TransportError, 200},
		{"error event", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(200)
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine died\"}}\n\n")
		}, WorkerLost, 200},
		{"oom event", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(200)
			fmt.Fprint(w, "data: {\"object\":\"error\",\"message\":\"CUDA out of memory\"}\n\n")
		}, OOM, 200},
		{"503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }, AdmissionRejected, 503},
		{"429", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(429) }, AdmissionRejected, 429},
		{"500 oom", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(500)
			fmt.Fprint(w, `{"error":{"message":"torch.OutOfMemoryError: CUDA"}}`)
		}, OOM, 500},
		{"502", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(502) }, WorkerLost, 502},
		{"400", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(400) }, HarnessError, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			for name, o := range sendEach(t, srv.URL) {
				if o.class != tc.want || o.status != tc.status {
					t.Fatalf("%s: class %s status %d (%s), want %s %d", name, o.class, o.status, o.reason, tc.want, tc.status)
				}
				if tc.want == Success && (o.outputTokens != 4 || o.promptTokens != 3 || o.chunks < 1 || o.chunks > 4 || o.firstToken == 0 || o.end < o.firstToken) {
					t.Fatalf("%s: outcome %+v", name, o)
				}
				if strings.Contains(o.reason, "engine died") || strings.Contains(o.reason, "CUDA") {
					t.Fatalf("%s: reason %q quotes the server", name, o.reason)
				}
			}
		})
	}
	// No server at all.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	for name, o := range sendEach(t, url) {
		if o.class != TransportError || o.status != 0 || o.reason != "no response: dial failed" {
			t.Fatalf("%s: no server: %+v", name, o)
		}
	}
}

// TestSendInvalidOutput: a 200 stream that ended with [DONE] but whose
// chunks or usage cannot be a correct completion is invalid-output, for
// the reason given.
func TestSendInvalidOutput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    Class
		reason  string
	}{
		{"no token chunk, usage claims the tokens", raw(`{"choices":[{"text":""}]}`, usage(3, 4)), InvalidOutput, "no token chunk"},
		{"a chunk that is not a JSON object", raw(tokenChunk, tokenChunk, `{"choices":[{"text":" t"}],}`, tokenChunk, usage(3, 4)), InvalidOutput, "not a JSON object"},
		{"a chunk that is not JSON", raw(tokenChunk, tokenChunk, tokenChunk, " tok3", usage(3, 4)), InvalidOutput, "not a JSON object"},
		{"more token chunks than usage reports", func(w http.ResponseWriter, _ *http.Request) { sse(w, 5, 4, true) }, InvalidOutput, "5 token chunks, usage reports 4"},
		{"several tokens a chunk", raw(tokenChunk, tokenChunk, usage(3, 4)), Success, ""},
		{"negative prompt tokens", raw(tokenChunk, tokenChunk, tokenChunk, tokenChunk, usage(-3, 4)), InvalidOutput, "negative token count"},
		{"negative output tokens", raw(tokenChunk, usage(3, -4)), InvalidOutput, "negative token count"},
		{"prompt tokens other than the token ids", raw(tokenChunk, tokenChunk, tokenChunk, tokenChunk, usage(4, 4)), InvalidOutput, "4 prompt tokens, the manifest's token ids are 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			for name, o := range sendEach(t, srv.URL) {
				if o.class != tc.want || !strings.Contains(o.reason, tc.reason) || o.status != 200 {
					t.Fatalf("%s: class %s (%s), want %s (%s)", name, o.class, o.reason, tc.want, tc.reason)
				}
			}
		})
	}
}

// TestReadChunk: one pass reads whether a chunk carries a token, has
// choices, usage or an error, and refuses what is not JSON or not of the
// completion chunk's types.
func TestReadChunk(t *testing.T) {
	for _, tc := range []struct {
		chunk string
		want  chunk
		why   string
	}{
		{`{"choices":[{"index":0,"text":" tok","finish_reason":null}],"usage":null}`, chunk{token: true, choices: true}, ""},
		{`{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, chunk{choices: true}, ""},
		{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, chunk{choices: true}, ""},
		{`{"choices":[{"delta":{"content": "hi"}}]}`, chunk{token: true, choices: true}, ""},
		{`{"choices":[{"delta":{"reasoning_content":"x"}}]}`, chunk{token: true, choices: true}, ""},
		{`{"choices":[{"text":"say \"text\": \"\""}]}`, chunk{token: true, choices: true}, ""},
		{`{"choices":[{"text":"\u0000"}]}`, chunk{token: true, choices: true}, ""},
		{`{"choices":[{"logprobs":{"text":"x","content":"y"}}]}`, chunk{choices: true}, ""},
		{`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":null}}`, chunk{usage: true, promptTokens: 3, output: 4}, ""},
		{`{"choices":[{"text":"t"}],"usage":{"prompt_tokens":3,"completion_tokens":null}}`, chunk{token: true, choices: true, usage: true, promptTokens: 3}, ""},
		{`{"choices": [ ] }`, chunk{}, ""},
		{`{"error":{"message":"x"}}`, chunk{errorEvent: true}, ""},
		{`{"error":null,"choices":null}`, chunk{}, ""},
		{`{"object":"error","message":"x"}`, chunk{errorEvent: true}, ""},
		{`not json`, chunk{}, notObject},
		{`[{"choices":[]}]`, chunk{}, notObject},
		{`{"choices":[{"text":" t"}],}`, chunk{}, notObject},
		{`{"choices": tok}`, chunk{}, notObject},
		{`{"choices":[]}{}`, chunk{}, notObject},
		{`{"choices":[{"text":"\x"}]}`, chunk{}, notObject},
		{`{"choices":[{"text":1}]}`, chunk{}, wrongType},
		{`{"choices":{"text":"t"}}`, chunk{}, wrongType},
		{`{"choices":["t"]}`, chunk{}, wrongType},
		{`{"choices":[{"delta":"t"}]}`, chunk{}, wrongType},
		{`{"choices":[{"delta":{"content":["t"]}}]}`, chunk{}, wrongType},
		{`{"choices":[{"finish_reason":1}]}`, chunk{}, wrongType},
		{`{"usage":{"prompt_tokens":3,"completion_tokens":4.0}}`, chunk{}, wrongType},
		{`{"usage":{"prompt_tokens":"3","completion_tokens":4}}`, chunk{}, wrongType},
		{`{"usage":[3,4]}`, chunk{}, wrongType},
		{`{"object":1}`, chunk{}, wrongType},
		{`{"message":{}}`, chunk{}, wrongType},
	} {
		c, why := readChunk([]byte(tc.chunk), ServerAuto)
		if c != tc.want || why != tc.why {
			t.Errorf("readChunk(%s) = %+v %q, want %+v %q", tc.chunk, c, why, tc.want, tc.why)
		}
	}
}

// TestSendRedirectIsNotFollowed: a redirect is classified by its status
// (harness-error), never followed to a stream elsewhere.
func TestSendRedirectIsNotFollowed(t *testing.T) {
	followed := false
	mux := http.NewServeMux()
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, _ *http.Request) { followed = true; sse(w, 4, 4, true) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	clock, _ := NewClock()
	for name, s := range testSenders(t, srv.URL, clock) {
		if o := s.send(context.Background(), []byte(`{}`), expect{output: 4}); o.class != HarnessError || o.status != 307 || followed {
			t.Fatalf("%s: class %s status %d followed %v", name, o.class, o.status, followed)
		}
	}
}

// TestSendStreamErrorByStatus: an error event in a 200 stream is classed
// by the status it carries, as the same error answered as a status is:
// vLLM's create_streaming_error_response (docs/servers.md, "In-stream
// errors") sends the error response's JSON, {"error": {"message",
// "type", "param", "code"}}, the HTTP status as code, then [DONE]; older
// vLLM the same members at the top level. A prompt over the context is a
// 400, the harness's; a 5xx worker-lost; out of memory OOM; an event
// without a status worker-lost. The reason names the status, never the
// server's message.
func TestSendStreamErrorByStatus(t *testing.T) {
	over := `This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.`
	for _, tc := range []struct {
		name, event string
		want        Class
		reason      string
	}{
		{"400, nested", `{"error": {"message": "` + over + `", "type": "BadRequestError", "param": "input_tokens", "code": 400}}`, HarnessError, "error event in the stream: status 400"},
		{"400, top level", `{"object": "error", "message": "` + over + `", "type": "BadRequestError", "param": null, "code": 400}`, HarnessError, "error event in the stream: status 400"},
		{"404", `{"error": {"message": "The model ` + "`x`" + ` does not exist.", "type": "NotFoundError", "param": null, "code": 404}}`, HarnessError, "status 404"},
		{"429", `{"error": {"message": "busy", "type": "TooManyRequests", "param": null, "code": 429}}`, AdmissionRejected, "status 429"},
		{"500", `{"error": {"message": "engine step failed", "type": "InternalServerError", "param": null, "code": 500}}`, WorkerLost, "status 500"},
		{"500, out of memory", `{"error": {"message": "CUDA out of memory", "type": "InternalServerError", "param": null, "code": 500}}`, OOM, "out of memory"},
		{"no status", `{"error": {"message": "something"}}`, WorkerLost, "error event in the stream"},
		{"a string code", `{"error": {"message": "something", "code": "model_not_found"}}`, WorkerLost, "error event in the stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(raw(tokenChunk, tc.event))
			defer srv.Close()
			for name, o := range sendEach(t, srv.URL) {
				if o.class != tc.want || o.reason != tc.reason && !strings.HasSuffix(o.reason, tc.reason) || o.status != 200 {
					t.Fatalf("%s: %s %q (status %d), want %s %q", name, o.class, o.reason, o.status, tc.want, tc.reason)
				}
				if strings.Contains(o.reason, "context length") || strings.Contains(o.reason, "engine step") {
					t.Fatalf("%s: reason %q quotes the server", name, o.reason)
				}
			}
		})
	}
}
