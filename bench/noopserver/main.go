// Command noopserver is a loopback OpenAI-shaped streaming server that
// does no work, for measuring load clients (bench/loadgen.sh): every
// POST to /v1/completions or /v1/chat/completions answers a stream of
// --tokens one-token chunks, --token-ms apart, then a usage chunk and
// [DONE]. It reads max_tokens and a token-id prompt's length from the
// body only to report them in usage,
// so a client asking for exact output tokens gets them when --tokens is 0
// (one chunk per requested token).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	portFile := flag.String("port-file", "", "write the bound port here")
	tokens := flag.Int("tokens", 1, "token chunks per response (0: max_tokens of the request)")
	tokenMS := flag.Float64("token-ms", 0, "milliseconds between token chunks")
	flag.Parse()
	interval := time.Duration(*tokenMS * float64(time.Millisecond))
	handle := func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxTokens int   `json:"max_tokens"`
			Prompt    []int `json:"prompt"` // token ids; usage reports their count
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		prompt := max(len(req.Prompt), 1)
		n := *tokens
		if n == 0 {
			n = max(req.MaxTokens, 1)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		var tick *time.Ticker
		if interval > 0 {
			tick = time.NewTicker(interval)
			defer tick.Stop()
		}
		for i := 0; i < n; i++ {
			if tick != nil {
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
			}
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":null}]}\n\n")
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", prompt, n)
		fl.Flush()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", handle)
	mux.HandleFunc("POST /v1/chat/completions", handle)
	mux.HandleFunc("POST /start_profile", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("POST /stop_profile", func(w http.ResponseWriter, _ *http.Request) {})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if *portFile != "" {
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		if err := os.WriteFile(*portFile, []byte(port+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	log.Fatal(http.Serve(ln, mux))
}
