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
			clock, _ := NewClock()
			s := &sender{client: srv.Client(), url: srv.URL, clock: clock}
			o := s.send(context.Background(), []byte(`{}`), 4, true)
			if o.class != tc.want || o.status != tc.status {
				t.Fatalf("class %s status %d (%s), want %s %d", o.class, o.status, o.reason, tc.want, tc.status)
			}
			if tc.want == Success && (o.outputTokens != 4 || o.promptTokens != 3 || o.chunks != 4 || o.firstToken == 0 || o.end < o.firstToken) {
				t.Fatalf("outcome %+v", o)
			}
			if strings.Contains(o.reason, "engine died") || strings.Contains(o.reason, "CUDA") {
				t.Fatalf("reason %q quotes the server", o.reason)
			}
		})
	}
	// No server at all.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	clock, _ := NewClock()
	s := &sender{client: http.DefaultClient, url: url, clock: clock}
	if o := s.send(context.Background(), []byte(`{}`), 4, true); o.class != TransportError || o.status != 0 {
		t.Fatalf("no server: %+v", o)
	}
}

func TestScanChunk(t *testing.T) {
	for _, tc := range []struct {
		chunk                string
		token, decode, whole bool
	}{
		{`{"choices":[{"index":0,"text":" tok","finish_reason":null}],"usage":null}`, true, false, true},
		{`{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, false, false, true},
		{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false, false, true},
		{`{"choices":[{"delta":{"content": "hi"}}]}`, true, false, true},
		{`{"choices":[{"delta":{"reasoning_content":"x"}}]}`, true, false, true},
		{`{"choices":[{"text":"say \"text\": \"\""}]}`, true, false, true},
		{`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`, false, true, true},
		{`{"error":{"message":"x"}}`, false, true, true},
		{`{"object":"error","message":"x"}`, false, true, true},
		{`not json`, false, false, false},
	} {
		token, decode, whole := scanChunk([]byte(tc.chunk), ServerAuto.tokenKeys())
		if token != tc.token || decode != tc.decode || whole != tc.whole {
			t.Errorf("scanChunk(%s) = %v %v %v, want %v %v %v", tc.chunk, token, decode, whole, tc.token, tc.decode, tc.whole)
		}
	}
}
