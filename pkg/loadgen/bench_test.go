package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkSend measures the client's cost of one streamed request of 16
// token chunks, each written and flushed apart, and a usage chunk, against an in-process no-op server (the
// server's cost is included: compare runs, not absolute figures).
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 16; i++ {
			fmt.Fprint(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n")
			w.(http.Flusher).Flush() // one write per token, as servers stream
		}
		fmt.Fprint(w, "data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":16,\"total_tokens\":20}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	clock, _ := NewClock()
	tr := newTransport(4)
	defer tr.CloseIdleConnections()
	s := &sender{client: &http.Client{Transport: tr}, url: srv.URL, clock: clock, itl: func(int64, int64) {}}
	body := []byte(`{"model":"m","prompt":[1,2,3,4],"max_tokens":16,"stream":true}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if o := s.send(context.Background(), body, expect{output: 16, exact: true}); o.class != Success {
			b.Fatalf("class %s: %s", o.class, o.reason)
		}
	}
}
