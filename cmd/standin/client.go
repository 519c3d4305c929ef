package main

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
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/atomicfile"
)

// failureBackoff is how long a worker pauses after a failed request, so that
// a server that is down costs failures, not a busy loop.
const failureBackoff = 10 * time.Millisecond

// clientConfig holds the flags of "standin client".
type clientConfig struct {
	url         string
	model       string
	warmupS     float64
	measureS    float64
	drainS      float64
	drainExtraS float64
	concurrency int
	maxTokens   int
	maxRequests int
	promptWords int
	stream      bool
	resultDir   string
	phaseFile   string
	hang        bool
	fail        bool
	// profiles is the number of profile windows called after the clean
	// interval; loadgen the loadgen-format files.
	profiles int
	loadgen  loadgenFmtConfig
	seed     seedClientConfig
	// resultDelayS: seconds between the drain's end and the results (a
	// slow result write); noDrained: no drained line (a client that
	// writes none, whose drain is timed to done)
	resultDelayS float64
	noDrained    bool
}

// result is DIR/result.json. It holds counts and rates only: never prompts
// or generated text.
type result struct {
	Schema int `json:"schema"`
	// Requests counts the requests started in the clean interval;
	// Completed and Failed split them.
	Requests         int       `json:"requests"`
	Completed        int       `json:"completed"`
	Failed           int       `json:"failed"`
	MeasureS         float64   `json:"measure_s"`
	ThroughputRPS    float64   `json:"throughput_rps"`
	OutputTokensPerS float64   `json:"output_tokens_per_s"`
	StartedAt        time.Time `json:"started_at"` // start of the clean interval
	EndedAt          time.Time `json:"ended_at"`   // end of the clean interval
}

func newClientCmd() *cobra.Command {
	var cfg clientConfig
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Run a STAND-IN load client (tests and demos only; not a real benchmark client)",
		Long: `Run a STAND-IN load client for Warden's tests and demos. It is NOT a real
benchmark client and its figures measure nothing about any model.

It sends completions in a closed loop (--concurrency requests at a time): a
warm-up, a clean (measured) interval, then a drain in which it waits up to
--drain-s for the requests still in flight. Requests started in the clean
interval are counted. It appends {"phase","t","mono_ns"} JSON lines to the phase
file at each phase change (warmup, clean, drain, drained, done) and writes
DIR/result.json, with counts and rates only, before "done". "drained" is
written when every request in flight at the drain's start ended, none when
the drain was cut at --drain-s.

Exit codes: 0 done (even if requests failed: see result.json); 1 error or
interrupted; 2 --fail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("url") {
				port, ok := os.LookupEnv("WARDEN_PORT")
				if !ok {
					return errors.New("client: --url or $WARDEN_PORT is required")
				}
				cfg.url = "http://127.0.0.1:" + port
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runClient(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.url, "url", "", "server base URL (default http://127.0.0.1:$WARDEN_PORT)")
	f.StringVar(&cfg.model, "model", "standin", "model name to request")
	f.Float64Var(&cfg.warmupS, "warmup-s", 1, "seconds of warm-up, not counted")
	f.Float64Var(&cfg.measureS, "measure-s", 5, "seconds of the clean (measured) interval")
	f.Float64Var(&cfg.drainS, "drain-s", 10, "seconds to wait for in-flight requests after the clean interval; the rest count as failed")
	f.IntVar(&cfg.concurrency, "concurrency", 1, "requests in flight at once (closed loop)")
	f.IntVar(&cfg.maxTokens, "max-tokens", 16, "max_tokens of each request")
	f.IntVar(&cfg.maxRequests, "max-requests", 100000, "hard cap on requests sent in all")
	f.IntVar(&cfg.promptWords, "prompt-words", 8, "words in the synthetic prompt")
	f.BoolVar(&cfg.stream, "stream", false, "request streamed completions")
	f.StringVar(&cfg.resultDir, "result-dir", "", "directory for result.json (none written if empty)")
	f.StringVar(&cfg.phaseFile, "phase-file", os.Getenv("WARDEN_PHASE_FILE"), "file to append phase changes to (default $WARDEN_PHASE_FILE)")
	// Misbehaviour.
	f.BoolVar(&cfg.hang, "hang", false, "misbehave: never leave the drain phase; wait until killed")
	f.BoolVar(&cfg.fail, "fail", false, "misbehave: exit with code 2 after the warm-up")
	f.Float64Var(&cfg.drainExtraS, "drain-extra-s", 0, "misbehave: stay in the drain phase this many seconds longer than needed")
	f.Float64Var(&cfg.resultDelayS, "result-delay-s", 0, "misbehave: wait this many seconds after the drain before writing the results (a slow result write)")
	f.BoolVar(&cfg.noDrained, "no-drained-line", false, "write no drained phase line, as a client that does not report the drain's end")
	// Seed 002's artifacts.
	f.IntVar(&cfg.profiles, "profile-windows", 0, "after the clean interval, call POST /start_profile and /stop_profile this many times")
	f.StringVar(&cfg.loadgen.dir, "loadgen-dir", "", "also write a SYNTHETIC result in loadgen's format (result.json, segments.jsonl, requests/) here")
	f.IntVar(&cfg.loadgen.segments, "segments", 3, "with --loadgen-dir: clean segments the clean interval is cut into")
	f.StringVar(&cfg.loadgen.satResult, "saturation-result", "", "with --loadgen-dir: a loadgen-format saturation result.json; the run is then a moderate one at --rate-fraction of its throughput")
	f.Float64Var(&cfg.loadgen.rateFraction, "rate-fraction", 0.60, "with --saturation-result: λ as a fraction of the saturation throughput")
	f.StringVar(&cfg.loadgen.brk, "client-break", "", "misbehave: break the loadgen-format result: failures, tokens, rate, lag, text, segments, negative")
	addSeedClientFlags(cmd, &cfg.seed)
	return cmd
}

func (c *clientConfig) validate() error {
	switch {
	case c.concurrency < 1:
		return errors.New("--concurrency must be at least 1")
	case c.maxTokens < 1 || c.maxTokens > maxTokensLimit:
		return fmt.Errorf("--max-tokens must be between 1 and %d", maxTokensLimit)
	case c.maxRequests < 1:
		return errors.New("--max-requests must be at least 1")
	case c.measureS <= 0:
		return errors.New("--measure-s must be positive")
	case c.warmupS < 0 || c.drainS < 0 || c.drainExtraS < 0 || c.resultDelayS < 0:
		return errors.New("--warmup-s, --drain-s, --drain-extra-s and --result-delay-s must not be negative")
	case c.promptWords < 0:
		return errors.New("--prompt-words must not be negative")
	case c.profiles < 0:
		return errors.New("--profile-windows must not be negative")
	}
	return errors.Join(c.loadgen.validate(), c.seed.validate())
}

func runClient(ctx context.Context, cfg clientConfig) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	log := newLogger("client")
	phases, err := openPhaseLog(cfg.phaseFile)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer phases.close()

	g, err := newLoadGen(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer g.transport.CloseIdleConnections()
	// Requests run under reqCtx; cancelling it abandons those in flight.
	reqCtx, abandon := context.WithCancel(ctx)
	defer abandon()
	var wg sync.WaitGroup
	stopWorkers := func() {
		g.phase.Store(loadStopped)
		abandon()
		wg.Wait()
	}
	defer stopWorkers()

	log.Info("warm-up; this is a STAND-IN load client, not a real benchmark client",
		"url", cfg.url, "concurrency", cfg.concurrency)
	if err := cfg.seed.start(); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := phases.mark(phaseWarmup); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	for i := 0; i < cfg.concurrency; i++ {
		wg.Go(func() { g.worker(reqCtx) })
	}
	if err := sleepCtx(ctx, seconds(cfg.warmupS)); err != nil {
		return fmt.Errorf("client: interrupted in warm-up: %w", err)
	}
	if cfg.fail {
		stopWorkers()
		return &cli.ExitError{Code: 2, Err: errors.New("client: failing after warm-up as asked (--fail)")}
	}

	g.phase.Store(loadClean)
	cleanStart := time.Now()
	if err := phases.mark(phaseClean); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := sleepCtx(ctx, seconds(cfg.measureS)); err != nil {
		return fmt.Errorf("client: interrupted in the clean interval: %w", err)
	}
	g.phase.Store(loadStopped)
	cleanEnd := time.Now()
	windows, err := profileWindows(ctx, cfg.url, cfg.profiles, 20*time.Millisecond, seconds(cfg.seed.recoveryS), phases)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := phases.mark(phaseDrain); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if cfg.hang {
		log.Warn("hanging in drain until killed (--hang)")
		<-ctx.Done()
		return fmt.Errorf("client: interrupted while hanging in drain: %w", ctx.Err())
	}

	abandoned, err := drain(ctx, &wg, abandon, seconds(cfg.drainS))
	if err != nil {
		return fmt.Errorf("client: interrupted in drain: %w", err)
	}
	if err := sleepCtx(ctx, seconds(cfg.drainExtraS)); err != nil {
		return fmt.Errorf("client: interrupted in drain: %w", err)
	}
	// as Warden's load client: drained once every request ended, none
	// after a drain cut at the bound
	if !abandoned && !cfg.noDrained {
		if err := phases.mark(phaseDrained); err != nil {
			return fmt.Errorf("client: %w", err)
		}
	}
	if err := sleepCtx(ctx, seconds(cfg.resultDelayS)); err != nil {
		return fmt.Errorf("client: interrupted before writing its results: %w", err)
	}

	res := g.tally.result(cleanStart, cleanEnd)
	if err := writeResults(cfg, res, windows); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := phases.markWith(phaseDone, &res.Completed); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	fmt.Printf("standin client (stand-in, not a benchmark): requests=%d completed=%d failed=%d throughput_rps=%.3f output_tokens_per_s=%.3f\n",
		res.Requests, res.Completed, res.Failed, res.ThroughputRPS, res.OutputTokensPerS)
	return nil
}

// writeResults writes the client's result.json in --result-dir and the
// loadgen-format files in --loadgen-dir, where they are asked for.
func writeResults(cfg clientConfig, res result, windows []map[string]any) error {
	if cfg.resultDir != "" {
		if err := writeResult(cfg.resultDir, res); err != nil {
			return err
		}
	}
	if cfg.loadgen.dir != "" {
		if windows == nil {
			windows = []map[string]any{}
		}
		if err := writeLoadgenFiles(cfg, res, windows); err != nil {
			return err
		}
	}
	return nil
}

// drain waits for the workers to finish their last requests, for up to
// allowance; then it abandons the requests still in flight (they count as
// failed) and waits for the workers to notice. It says whether it
// abandoned any.
func drain(ctx context.Context, wg *sync.WaitGroup, abandon context.CancelFunc, allowance time.Duration) (abandoned bool, err error) {
	drained := make(chan struct{})
	// Ends when every worker has returned, which abandon guarantees.
	go func() {
		wg.Wait()
		close(drained)
	}()
	t := time.NewTimer(allowance)
	defer t.Stop()
	select {
	case <-drained:
		return false, nil
	case <-t.C:
		abandon()
		<-drained
		return true, nil
	case <-ctx.Done():
		abandon()
		<-drained
		return true, ctx.Err()
	}
}

func writeResult(dir string, res result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("result directory: %w", err)
	}
	return atomicfile.WriteJSON(filepath.Join(dir, "result.json"), res, 0o644)
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Load phases as the workers see them.
const (
	loadWarmup int32 = iota
	loadClean
	loadStopped
)

// loadGen sends requests from a fixed number of workers.
type loadGen struct {
	cfg       clientConfig
	transport *http.Transport
	client    *http.Client
	body      []byte
	// phase is loadWarmup, loadClean or loadStopped.
	phase atomic.Int32
	// sent counts requests started, against --max-requests.
	sent  atomic.Int64
	tally tally
}

func newLoadGen(cfg clientConfig) (*loadGen, error) {
	body, err := json.Marshal(map[string]any{
		"model":      cfg.model,
		"prompt":     strings.TrimSpace(strings.Repeat("word ", cfg.promptWords)),
		"max_tokens": cfg.maxTokens,
		"stream":     cfg.stream,
	})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	tr := &http.Transport{
		Proxy:               nil, // loopback; never through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: cfg.concurrency,
		IdleConnTimeout:     30 * time.Second,
	}
	return &loadGen{cfg: cfg, transport: tr, client: &http.Client{Transport: tr}, body: body}, nil
}

// worker sends one request after another until the load stops, the request
// cap is reached, or ctx is done.
func (g *loadGen) worker(ctx context.Context) {
	for g.phase.Load() != loadStopped && ctx.Err() == nil {
		if g.sent.Add(1) > int64(g.cfg.maxRequests) {
			return
		}
		counted := g.phase.Load() == loadClean
		tokens, err := g.request(ctx)
		if counted {
			g.tally.record(tokens, err)
		}
		if err != nil && sleepCtx(ctx, failureBackoff) != nil {
			return
		}
	}
}

// request sends one completion and returns the number of tokens generated.
func (g *loadGen) request(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.url+"/v1/completions", bytes.NewReader(g.body))
	if err != nil {
		return 0, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return 0, fmt.Errorf("completion: status %d", resp.StatusCode)
	}
	if g.cfg.stream {
		return readStream(resp.Body)
	}
	var out completionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("decode completion: %w", err)
	}
	if out.Usage == nil {
		return 0, errors.New("decode completion: no usage")
	}
	return out.Usage.CompletionTokens, nil
}

// readStream counts the tokens of a streamed completion, one per chunk
// with a choice, and requires the closing "[DONE]".
func readStream(body io.Reader) (int, error) {
	tokens := 0
	done, err := sseData(body, func(payload string) error {
		var chunk completionResponse
		if err := json.Unmarshal([]byte(payload), &chunk); err != nil {
			return fmt.Errorf("decode stream chunk: %w", err)
		}
		tokens += len(chunk.Choices)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !done {
		return 0, errors.New("read stream: ended before [DONE]")
	}
	return tokens, nil
}

// sseData calls fn with the payload of each "data: " line of the
// server-sent events in body, up to "[DONE]". It returns whether "[DONE]"
// came, and fn's first error or the read's (as "read stream: ...").
func sseData(body io.Reader, fn func(payload string) error) (done bool, err error) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if payload == "[DONE]" {
			return true, nil
		}
		if err := fn(payload); err != nil {
			return false, err
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read stream: %w", err)
	}
	return false, nil
}

// tally counts the requests started in the clean interval.
type tally struct {
	mu           sync.Mutex
	completed    int // guarded by mu
	failed       int // guarded by mu
	outputTokens int // guarded by mu
}

func (t *tally) record(tokens int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.failed++
		return
	}
	t.completed++
	t.outputTokens += tokens
}

func (t *tally) result(start, end time.Time) result {
	t.mu.Lock()
	defer t.mu.Unlock()
	measure := end.Sub(start).Seconds()
	return result{
		Schema:           1,
		Requests:         t.completed + t.failed,
		Completed:        t.completed,
		Failed:           t.failed,
		MeasureS:         measure,
		ThroughputRPS:    float64(t.completed) / measure,
		OutputTokensPerS: float64(t.outputTokens) / measure,
		StartedAt:        start.UTC(),
		EndedAt:          end.UTC(),
	}
}
