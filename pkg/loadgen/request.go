package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Endpoint is the OpenAI-compatible API a run drives.
type Endpoint string

const (
	// Completions is /v1/completions: prompts as token ids or text.
	Completions Endpoint = "completions"
	// Chat is /v1/chat/completions: text prompts, sent as one user message.
	Chat Endpoint = "chat"
)

// path is the endpoint's URL path.
func (e Endpoint) path() string {
	if e == Chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// bodyBuilder renders request bodies: streamed, with the final usage
// chunk asked for, max_tokens from the manifest, and vLLM's ignore_eos.
type bodyBuilder struct {
	endpoint    Endpoint
	model       []byte // JSON string
	temperature []byte // JSON number
	ignoreEOS   bool
}

func newBodyBuilder(e Endpoint, model string, temperature float64, ignoreEOS bool) (*bodyBuilder, error) {
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	t, err := json.Marshal(temperature)
	if err != nil {
		return nil, fmt.Errorf("temperature %v: %w", temperature, err)
	}
	return &bodyBuilder{endpoint: e, model: m, temperature: t, ignoreEOS: ignoreEOS}, nil
}

// build renders one body around prompt, the manifest's raw JSON.
func (b *bodyBuilder) build(prompt json.RawMessage, maxTokens int) []byte {
	buf := bytes.NewBuffer(make([]byte, 0, len(prompt)+256))
	buf.WriteString(`{"model":`)
	buf.Write(b.model)
	if b.endpoint == Chat {
		buf.WriteString(`,"messages":[{"role":"user","content":`)
		buf.Write(prompt)
		buf.WriteString(`}]`)
	} else {
		buf.WriteString(`,"prompt":`)
		buf.Write(prompt)
	}
	buf.WriteString(`,"max_tokens":`)
	buf.WriteString(strconv.Itoa(maxTokens))
	buf.WriteString(`,"temperature":`)
	buf.Write(b.temperature)
	if b.ignoreEOS {
		buf.WriteString(`,"ignore_eos":true`)
	}
	buf.WriteString(`,"stream":true,"stream_options":{"include_usage":true}}`)
	return buf.Bytes()
}

// newTransport is the HTTP transport of a run: no proxy, no compression,
// one kept-alive connection per outstanding request.
func newTransport(maxConns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     IdleKeepAlive,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		// Bodies are written once and the stream is read through the
		// client's own small reader: 2 KiB each way keeps an outstanding
		// request's memory down (the defaults are 4 KiB).
		WriteBufferSize: 2 << 10,
		ReadBufferSize:  2 << 10,
	}
}

// newClient is the HTTP client of a run. It never follows a redirect: a
// 3xx would have the request body, prompt included, sent again to wherever
// the server points. The 3xx itself is the request's answer, classed
// harness-error (classifyStatus).
func newClient(tr http.RoundTripper) *http.Client {
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// outcome is what one request produced, filled by send.
type outcome struct {
	status       int
	firstToken   int64 // CLOCK_MONOTONIC ns; 0 if none
	firstChunk   int64 // first chunk with choices (vLLM's bench TTFT); 0 if none
	end          int64
	promptTokens int
	outputTokens int
	usage        bool
	chunks       int
	itlMax       int64
	class        Class
	reason       string // why it is not a success; never server text
}

// streamChunk is the part of a streamed chunk (completions or chat) that
// the client reads. Text is decoded only to know whether a chunk carries
// a token; it is dropped at once.
type streamChunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			Reasoning        string `json:"reasoning"`
			ReasoningContent string `json:"reasoning_content"`
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

// expect is what a request's stream must report to be a success.
type expect struct {
	// output is max_tokens; exact (--ignore-eos) asks for exactly that
	// many output tokens in usage.
	output int
	exact  bool
	// input is the manifest's input_tokens; inputExact (token-id prompts,
	// whose length the server cannot count otherwise) requires usage's
	// prompt_tokens to equal it. A text prompt's count is the server's
	// tokenizer's (and, for chat, its template's): only counted.
	input      int
	inputExact bool
}

// sender sends requests of one run.
type sender struct {
	client *http.Client
	url    string
	clock  *Clock
	// itl receives every inter-token gap of each request, in nanoseconds,
	// with the monotonic time of the token that closed it.
	itl func(at, gapNS int64)
	// kind says which fields carry tokens (serverkind.go).
	kind ServerKind
}

// send posts body and reads the stream to its end. It never gives up on
// its own: only ctx ends a request early (then the class is
// client-cancelled).
func (s *sender) send(ctx context.Context, body []byte, e expect) outcome {
	var o outcome
	finish := func(c Class, reason string) outcome {
		o.end = s.clock.Now()
		o.class, o.reason = c, reason
		return o
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return finish(HarnessError, "build request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return finish(ClientCancelled, "cancelled before the response")
		}
		return finish(TransportError, "no response: "+errKind(err))
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		// Read a bounded part to classify; it is never stored.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return finish(classifyStatus(resp.StatusCode, data), "status "+strconv.Itoa(resp.StatusCode))
	}
	br := bufio.NewReaderSize(resp.Body, 1<<10)
	var last int64
	var scratch []byte
	for {
		line, err := nextLine(br, &scratch)
		if err != nil && !(err == io.EOF && len(line) > 0) {
			if ctx.Err() != nil {
				return finish(ClientCancelled, "cancelled mid-stream")
			}
			// A stream cut before [DONE] is a partial response: a failure.
			return finish(TransportError, "stream ended before [DONE]: "+errKind(err))
		}
		payload, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
		if !ok {
			continue
		}
		payload = bytes.TrimSpace(payload)
		if bytes.Equal(payload, []byte("[DONE]")) {
			break
		}
		token, decode, whole := scanChunk(payload, s.kind.tokenKeys())
		if o.firstChunk == 0 && hasChoices(payload) {
			o.firstChunk = s.clock.Now()
		}
		if !whole {
			return finish(InvalidOutput, "a stream chunk is not a JSON object")
		}
		if decode {
			// A chunk with usage or an error: decode it in full.
			var c streamChunk
			if err := json.Unmarshal(payload, &c); err != nil {
				return finish(InvalidOutput, "a stream chunk is not JSON")
			}
			if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) || c.Object == "error" {
				if isOOM(payload) {
					return finish(OOM, "error event in the stream: out of memory")
				}
				return finish(WorkerLost, "error event in the stream")
			}
			if c.Usage != nil {
				o.usage = true
				o.promptTokens = c.Usage.PromptTokens
				o.outputTokens = c.Usage.CompletionTokens
			}
			token = false
			for _, ch := range c.Choices {
				if ch.Text != "" || ch.Delta.Content != "" || s.kind.reasons(ch.Delta.Reasoning, ch.Delta.ReasoningContent) {
					token = true
				}
			}
		}
		if token {
			now := s.clock.Now()
			o.chunks++
			if o.firstToken == 0 {
				o.firstToken = now
			} else {
				gap := now - last
				if gap > o.itlMax {
					o.itlMax = gap
				}
				if s.itl != nil {
					s.itl(now, gap)
				}
			}
			last = now
		}
		if err == io.EOF {
			return finish(TransportError, "stream ended before [DONE]")
		}
	}
	if reason := o.invalid(e); reason != "" {
		return finish(InvalidOutput, reason)
	}
	return finish(Success, "")
}

// invalid says why a stream that ended with [DONE] is not a success ("" if
// it is). Every chunk carries at least one token, so the token chunks
// counted are at least one and at most usage's completion_tokens; they
// may be fewer (a server may put several tokens in one chunk, as with
// speculative decoding), so equality is not asked.
func (o *outcome) invalid(e expect) string {
	switch {
	case !o.usage:
		return "no usage in the stream"
	case o.promptTokens < 0 || o.outputTokens < 0:
		return fmt.Sprintf("negative token count in usage (%d prompt, %d output)", o.promptTokens, o.outputTokens)
	case o.chunks == 0:
		return fmt.Sprintf("no token chunk in the stream, usage reports %d output tokens", o.outputTokens)
	case o.chunks > o.outputTokens:
		return fmt.Sprintf("%d token chunks, usage reports %d output tokens", o.chunks, o.outputTokens)
	case e.exact && o.outputTokens != e.output:
		return fmt.Sprintf("%d output tokens, %d requested", o.outputTokens, e.output)
	case e.inputExact && o.promptTokens != e.input:
		return fmt.Sprintf("%d prompt tokens, the manifest's token ids are %d", o.promptTokens, e.input)
	}
	return ""
}

// nextLine returns the stream's next line without copying it: the slice
// is valid until the next call. A line longer than the reader's buffer is
// gathered in *scratch, up to MaxLineBytes.
func nextLine(br *bufio.Reader, scratch *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	*scratch = append((*scratch)[:0], line...)
	for {
		line, err = br.ReadSlice('\n')
		*scratch = append(*scratch, line...)
		if len(*scratch) > MaxLineBytes {
			return nil, fmt.Errorf("a stream line longer than %d bytes", MaxLineBytes)
		}
		if err != bufio.ErrBufferFull {
			return *scratch, err
		}
	}
}

// scanChunk reads a stream chunk without decoding it: whether it carries
// a token (a non-empty string under one of keys: "text", "content", and
// the server kind's reasoning field),
// whether it must be decoded in full (it has a non-null "usage" or
// mentions "error"), and whether it is a JSON object at all (checked
// with json.Valid, which builds nothing). Token chunks, nearly all of a
// stream, are never decoded: decoding them was a third of the client's
// CPU. Keys are matched with their quotes and colon, which a JSON string
// value cannot contain unescaped.
func scanChunk(p []byte, keys []string) (token, decode, whole bool) {
	if len(p) < 2 || p[0] != '{' || p[len(p)-1] != '}' || !json.Valid(p) {
		return false, false, false
	}
	if bytes.Contains(p, []byte(`"error"`)) {
		return false, true, true
	}
	if v, ok := valueAfter(p, `"usage":`); ok && v != 'n' {
		decode = true
	}
	for _, key := range keys {
		rest := p
		for {
			i := bytes.Index(rest, []byte(key))
			if i < 0 {
				break
			}
			rest = skipSpace(rest[i+len(key):])
			if len(rest) >= 2 && rest[0] == '"' && rest[1] != '"' {
				return true, decode, true
			}
		}
	}
	return false, decode, true
}

// valueAfter returns the first byte of the value after key.
func valueAfter(p []byte, key string) (byte, bool) {
	i := bytes.Index(p, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := skipSpace(p[i+len(key):])
	if len(rest) == 0 {
		return 0, false
	}
	return rest[0], true
}

func skipSpace(p []byte) []byte {
	for len(p) > 0 && (p[0] == ' ' || p[0] == '\t' || p[0] == '\n' || p[0] == '\r') {
		p = p[1:]
	}
	return p
}

// classifyStatus maps an HTTP error status (and its body, read only for
// this) to a terminal class.
func classifyStatus(status int, body []byte) Class {
	switch {
	case isOOM(body):
		return OOM
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return AdmissionRejected
	case status >= 500:
		return WorkerLost
	}
	// 4xx: the server refused what the client built (a prompt too long
	// for the model, a wrong model name): the harness's fault. A 3xx (a
	// redirect, never followed) is the harness's too: the endpoint it was
	// given is not the server's.
	return HarnessError
}

// isOOM reports whether an error text says the server ran out of memory.
func isOOM(b []byte) bool {
	l := bytes.ToLower(b)
	return bytes.Contains(l, []byte("out of memory")) || bytes.Contains(l, []byte("outofmemory"))
}

// errKind names a transport error without its text, which may quote
// addresses but never content.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection closed"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op + " failed"
	}
	return "transport error"
}
