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
	"sync"
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
	// modalities is a chat request's "modalities" (JSON array), nil
	// for none (audio.go).
	modalities []byte
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
		if b.modalities != nil {
			buf.WriteString(`,"modalities":`)
			buf.Write(b.modalities)
		}
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
	// usageSource is UsageClient when the output was counted from the
	// stream (clientCount); countable says the kind may do so.
	usageSource string
	countable   bool
	// audio is the request's audio; nil until a chunk carries some.
	audio  *audioTrack
	class  Class
	reason string // why it is not a success; never server text
	// unsent: the request was never handed to the transport.
	unsent bool
	// stress is the request's stress state (stress.go); nil without.
	stress *stressTrack
	// capture keeps the text and audio of a quality-pass request
	// (quality.go); nil for every request of the run itself.
	capture *capture
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
	// cancel: the client cancels the request after its first output
	// chunk (stress.go).
	cancel bool
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
	// minAudioSamples is the playable minimum of an audio chunk, and
	// audioFormat the format the server declares (audio.go).
	minAudioSamples int64
	audioFormat     AudioFormat
	// stress is the run's stress options (stress.go); nil for none.
	stress *Stress
	// conns, when set, carries the streamed requests on the client's own
	// HTTP/1.1 connections (h1.go); else client does.
	conns *h1Pool
	// capture: keep each request's text and audio (the quality pass's
	// sender only, quality.go).
	capture bool
}

// streamHeader is every streamed request's header. It is shared and
// never written: the transport only reads a request's header.
var streamHeader = http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}}

// readers are the stream readers of finished requests, for reuse: 1 KiB
// each, one per outstanding request.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1<<10) }}

// send posts body and reads the stream to its end. It never gives up on
// its own: only ctx ends a request early (then the class is
// client-cancelled, or deadline-exceeded when ctx's deadline passed).
func (s *sender) send(ctx context.Context, body []byte, e expect) outcome {
	o := outcome{countable: s.kind.countsWithoutUsage()}
	if s.capture {
		o.capture = &capture{}
	}
	ctx, endStress := s.startStress(ctx, &o, e)
	defer endStress()
	finish := func(c Class, reason string) outcome {
		o.end = s.clock.Now()
		o.class, o.reason = c, reason
		return o
	}
	if s.conns != nil {
		return s.sendH1(ctx, body, e, &o, finish)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return finish(HarnessError, "build request")
	}
	req.Header = streamHeader
	rt := s.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	// The transport directly: a redirect is not followed but classified
	// by its status, and no per-request header copy for redirects is made.
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return finish(noResponse(ctx, err))
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	out, _ := s.respond(ctx, resp.Body, e, &o, finish)
	return out
}

// sendH1 is send on the run's own HTTP/1.1 connections (h1.go). A
// connection is reused only when its stream ended with [DONE] and its body
// ended within tailWait after; the request's end is taken before.
func (s *sender) sendH1(ctx context.Context, body []byte, e expect, o *outcome, finish func(Class, string) outcome) outcome {
	c, err := s.conns.get(ctx)
	if err != nil {
		return finish(noResponse(ctx, err))
	}
	// Ending ctx ends the request: its connection is closed, which is what
	// the server sees of a client that gave up.
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	done := false
	defer func() {
		if stop() && done && c.finishBody() {
			s.conns.put(c)
			return
		}
		c.nc.Close()
	}()
	if err := c.write(s.conns, body); err != nil {
		return finish(noResponse(ctx, err))
	}
	status, err := c.readHead()
	if err != nil {
		return finish(noResponse(ctx, err))
	}
	o.status = status
	var out outcome
	out, done = s.respond(ctx, c, e, o, finish)
	return out
}

// noResponse classes a request that got no response: ended by its
// context, or a transport error.
func noResponse(ctx context.Context, err error) (Class, string) {
	if ctx.Err() != nil {
		return ended(ctx, "before the response")
	}
	return TransportError, "no response: " + errKind(err)
}

// respond reads a response of status o.status with its body: a non-200 is
// classed by its status (a bounded part of the body is read for that and
// never stored), a 200's stream is read to its [DONE] and judged. done
// says the stream reached its [DONE].
func (s *sender) respond(ctx context.Context, body io.Reader, e expect, o *outcome, finish func(Class, string) outcome) (outcome, bool) {
	if o.status != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(body, 1<<16))
		return finish(classifyStatus(o.status, data), "status "+strconv.Itoa(o.status)), false
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(body)
	defer func() { br.Reset(nil); readers.Put(br) }()
	if c, why, done := s.readStream(ctx, br, o); !done {
		return finish(c, why), false
	}
	if reason := o.invalid(e); reason != "" {
		return finish(InvalidOutput, reason), true
	}
	return finish(Success, ""), true
}

// readStream reads the event stream of a response into o up to its
// [DONE]. done is false when the stream ends otherwise: c and why are
// then the request's class and reason.
func (s *sender) readStream(ctx context.Context, br *bufio.Reader, o *outcome) (c Class, why string, done bool) {
	var last int64
	var scratch []byte
	for {
		line, err := nextLine(br, &scratch)
		if err != nil && !(err == io.EOF && len(line) > 0) {
			if ctx.Err() != nil {
				c, why := ended(ctx, "mid-stream")
				return c, why, false
			}
			// A stream cut before [DONE] is a partial response: a failure.
			return TransportError, "stream ended before [DONE]: " + errKind(err), false
		}
		payload, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
		if !ok {
			continue
		}
		payload = bytes.TrimSpace(payload)
		if bytes.Equal(payload, []byte("[DONE]")) {
			return "", "", true
		}
		ch, why := readChunk(payload, s.kind)
		if o.firstChunk == 0 && ch.choices {
			o.firstChunk = s.clock.Now()
		}
		if why != "" {
			return InvalidOutput, why, false
		}
		if ch.errorEvent {
			c, why := streamError(payload)
			return c, why, false
		}
		if ch.audio {
			if why := s.addAudio(o, payload); why != "" {
				return InvalidOutput, why, false
			}
		}
		if o.capture != nil {
			o.capture.add(payload, ch)
		}
		if ch.usage {
			o.usage = true
			o.promptTokens, o.outputTokens = ch.promptTokens, ch.output
		}
		if ch.token {
			last = s.tokenAt(o, last)
		}
		if o.stress != nil {
			if c, why, stop := s.afterChunk(ctx, o, ch); stop {
				return c, why, false
			}
		}
		if err == io.EOF {
			return TransportError, "stream ended before [DONE]", false
		}
	}
}

// ended classes a request whose context ended where: past its deadline
// (deadline-exceeded), else cancelled by the client.
func ended(ctx context.Context, where string) (Class, string) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return DeadlineExceeded, "past its deadline " + where
	}
	return ClientCancelled, "cancelled " + where
}

// tokenAt counts a chunk that carries a token into o, given when the one
// before it came (last), and returns when this one came.
func (s *sender) tokenAt(o *outcome, last int64) int64 {
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
	return now
}

// TextPromptTolerance is how far a text prompt's prompt_tokens may be from
// the manifest's input_tokens and still be the prompt that was sent: the
// seed's tokenizer parity bound ("absolute error at most one token for
// every row", seeds/002, the private materialization). A token-id
// prompt's count must be exact.
const TextPromptTolerance = 1

// invalid says why a stream that ended with [DONE] is not a success ("" if
// it is). Every chunk carries at least one token, so the token chunks
// counted are at least one and at most usage's completion_tokens; they
// may be fewer (a server may put several tokens in one chunk, as with
// speculative decoding), so equality is not asked. A usage the request
// could not have produced (more output tokens than its max_tokens, a
// prompt of another length than the manifest's) is refused whatever the
// protocol validates later.
func (o *outcome) invalid(e expect) string {
	if !o.usage && !o.clientCount(e) {
		if e.exact && o.countable {
			return "no usage in the stream: the exact output count (--ignore-eos) cannot be checked without it"
		}
		return "no usage in the stream"
	}
	switch {
	case o.promptTokens < 0 || o.outputTokens < 0:
		return fmt.Sprintf("negative token count in usage (%d prompt, %d output)", o.promptTokens, o.outputTokens)
	case o.chunks == 0 && !o.audio.carried():
		return fmt.Sprintf("no token chunk in the stream, usage reports %d output tokens", o.outputTokens)
	case o.chunks > o.outputTokens:
		return fmt.Sprintf("%d token chunks, usage reports %d output tokens", o.chunks, o.outputTokens)
	case e.output > 0 && o.outputTokens > e.output:
		return fmt.Sprintf("usage reports %d output tokens, above the request's max_tokens %d", o.outputTokens, e.output)
	case o.audio != nil && len(o.audio.violations()) > 0:
		return "waveform: " + o.audio.violations()[0]
	case e.exact && o.outputTokens != e.output:
		return fmt.Sprintf("%d output tokens, %d requested", o.outputTokens, e.output)
	case o.usageSource == UsageClient:
		// the prompt was not counted by the server: nothing to compare
	case e.inputExact && o.promptTokens != e.input:
		return fmt.Sprintf("%d prompt tokens, the manifest's token ids are %d", o.promptTokens, e.input)
	case !e.inputExact && e.input > 0 && abs(o.promptTokens-e.input) > TextPromptTolerance:
		return fmt.Sprintf("usage reports %d prompt tokens, the manifest's input_tokens is %d (more than %d apart)", o.promptTokens, e.input, TextPromptTolerance)
	}
	return ""
}

// clientCount counts the output from the stream when the server sent no
// usage and its kind sends none for some pipelines (SGLang-Omni: usage
// only where the pipeline's decode result carries it), unless the count
// must be exact: the token chunks, a lower bound of the tokens, become
// the output tokens, marked as the client's (UsageClient). It reports
// whether it counted.
func (o *outcome) clientCount(e expect) bool {
	if !o.countable || e.exact {
		return false
	}
	o.usageSource, o.outputTokens, o.promptTokens = UsageClient, o.chunks, 0
	return true
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Usage sources of a request record.
const (
	// UsageServer: the counts are the server's usage (the default, not
	// written).
	UsageServer = ""
	// UsageClient: the server sent no usage; the output tokens are the
	// token chunks the client counted and the prompt is not counted.
	UsageClient = "client"
)

// streamError classes an error event in a stream by the status it carries,
// as a non-streamed error response is classed by its HTTP status
// (classifyStatus): vLLM's create_streaming_error_response sends
// {"error": {"message", "type", "param", "code"}} with the HTTP status as
// code (older versions the same members at the top level); a 400 (a prompt
// over the context) is the harness's, a 5xx worker-lost, a message of
// running out of memory OOM. An event without a status is worker-lost.
// The reason names the status, never the server's text.
func streamError(payload []byte) (Class, string) {
	var ev struct {
		Error json.RawMessage `json:"error"`
		Code  json.RawMessage `json:"code"`
	}
	_ = json.Unmarshal(payload, &ev)
	code := ev.Code
	if len(ev.Error) > 0 && ev.Error[0] == '{' {
		var inner struct {
			Code json.RawMessage `json:"code"`
		}
		if json.Unmarshal(ev.Error, &inner) == nil && len(inner.Code) > 0 {
			code = inner.Code
		}
	}
	status, err := strconv.Atoi(string(code))
	switch {
	case isOOM(payload):
		return OOM, "error event in the stream: out of memory"
	case err != nil || status < 100 || status > 599:
		return WorkerLost, "error event in the stream"
	}
	return classifyStatus(status, payload), "error event in the stream: status " + strconv.Itoa(status)
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
	case errors.Is(err, errMalformed), errors.Is(err, errHeadSize):
		return err.Error()
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
