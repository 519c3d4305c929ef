package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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

// rawStreamServer is a loopback HTTP/1.1 server that answers every
// request with pre-rendered bytes: the 16 token chunks and the usage
// chunk of BenchmarkSend, each in its own chunked-encoding write, so
// that nearly all the CPU a benchmark measures is the client's. It
// serves until the benchmark ends.
func rawStreamServer(b *testing.B) (url string) {
	head, tok, tail := streamWrites(16)
	tail = append(tail, "0\r\n\r\n"...)
	return newScriptServer(b, func(c net.Conn, _ int) bool {
		if _, err := c.Write(head); err != nil {
			return false
		}
		for range 16 {
			if _, err := c.Write(tok); err != nil {
				return false
			}
		}
		_, err := c.Write(tail)
		return err == nil
	}).url
}

// BenchmarkSendRaw is BenchmarkSend against rawStreamServer: the client's
// cost of one streamed request of 16 token chunks and a usage chunk, on
// the client's own HTTP/1.1 connections (h1) and through net/http.
func BenchmarkSendRaw(b *testing.B) {
	url := rawStreamServer(b)
	clock, _ := NewClock()
	body := []byte(`{"model":"m","prompt":[1,2,3,4],"max_tokens":16,"stream":true}`)
	for _, path := range []string{"h1", "net-http"} {
		b.Run(path, func(b *testing.B) {
			tr := newTransport(4)
			defer tr.CloseIdleConnections()
			s := &sender{client: &http.Client{Transport: tr}, url: url, clock: clock, itl: func(int64, int64) {}}
			if path == "h1" {
				s.conns, _ = newH1Pool(url, 4)
				defer s.conns.closeIdle()
			}
			b.ReportAllocs()
			for b.Loop() {
				if o := s.send(context.Background(), body, expect{output: 16, exact: true}); o.class != Success {
					b.Fatalf("class %s: %s", o.class, o.reason)
				}
			}
		})
	}
}

// BenchmarkSendBy is BenchmarkSendRaw through the run's sendBy, without a
// per-request deadline and with one (its context and timer are the
// request's, never a chunk's).
func BenchmarkSendBy(b *testing.B) {
	url := rawStreamServer(b)
	clock, _ := NewClock()
	tr := newTransport(4)
	defer tr.CloseIdleConnections()
	body := []byte(`{"model":"m","prompt":[1,2,3,4],"max_tokens":16,"stream":true}`)
	for _, d := range []time.Duration{0, time.Hour} {
		name := "no-deadline"
		if d > 0 {
			name = "deadline"
		}
		b.Run(name, func(b *testing.B) {
			r := &run{cfg: Config{RequestDeadline: d}, clock: clock,
				sender: &sender{client: &http.Client{Transport: tr}, url: url, clock: clock, itl: func(int64, int64) {}}}
			b.ReportAllocs()
			for b.Loop() {
				if o := r.sendBy(context.Background(), body, expect{output: 16, exact: true}, clock.Now()); o.class != Success {
					b.Fatalf("class %s: %s", o.class, o.reason)
				}
			}
		})
	}
}

// BenchmarkReadChunk: the client's cost of reading one chunk, a vLLM
// completions token chunk and its usage chunk; beside them what the
// previous reader spent at least (json.Valid on every chunk, and a full
// decode of the usage chunk into a struct).
func BenchmarkReadChunk(b *testing.B) {
	tok := []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}],"usage":null}`)
	use := []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":20,"completion_tokens":16,"prompt_tokens_details":null}}`)
	for _, c := range []struct {
		name string
		p    []byte
	}{{"token", tok}, {"usage", use}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, why := readChunk(c.p, ServerVLLM); why != "" {
					b.Fatal(why)
				}
			}
		})
		b.Run(c.name+"/json.Valid", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !json.Valid(c.p) {
					b.Fatal("invalid")
				}
			}
		})
	}
	b.Run("usage/json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v struct {
				Object  string `json:"object"`
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content, Reasoning, ReasoningContent string
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
				Error   json.RawMessage `json:"error"`
				Message string          `json:"message"`
			}
			if json.Unmarshal(use, &v) != nil {
				b.Fatal("invalid")
			}
		}
	})
}
