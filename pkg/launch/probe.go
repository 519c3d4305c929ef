package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// ErrExited is returned (wrapped) by Probe when the process being probed
// exits before it became ready.
var ErrExited = errors.New("process exited before it was ready")

// ProbeRequestTimeout bounds each HTTP request Probe makes.
const ProbeRequestTimeout = 2 * time.Second

// DefaultProbeInterval is used when Probe is given an interval <= 0.
const DefaultProbeInterval = 250 * time.Millisecond

// ProbeFirstWait is the wait after Probe's first failed attempt; each
// wait after that is twice the last, up to the interval, so a server that
// is ready within milliseconds is seen within about as long, and one that
// loads for minutes is asked every interval.
const ProbeFirstWait = time.Millisecond

// Probe polls url with HTTP GET until it answers wantStatus. Each request
// has its own deadline (ProbeRequestTimeout, or less if ctx ends sooner);
// attempts are ProbeFirstWait apart at first, the wait doubling up to
// interval. It returns nil on the wanted status, an
// error wrapping ErrExited as soon as exited is closed (a nil channel never
// closes), and an error wrapping ctx.Err() when ctx ends; so it runs no
// longer than ctx allows. The last failure seen is part of the error.
func Probe(ctx context.Context, url string, wantStatus int, interval time.Duration, exited <-chan struct{}) error {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	if _, err := http.NewRequest(http.MethodGet, url, nil); err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	// pctx also ends when the process exits, so a request in flight is
	// abandoned at once.
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-exited:
			cancel()
		case <-pctx.Done():
		}
	}()

	client := &http.Client{
		// No redirects: a health endpoint answers itself.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	defer client.CloseIdleConnections()

	fail := func(last error) error {
		select {
		case <-exited:
			return fmt.Errorf("probe %s: %w (last: %v)", url, ErrExited, last)
		default:
		}
		return fmt.Errorf("probe %s: %w (last: %v)", url, ctx.Err(), last)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	wait := min(ProbeFirstWait, interval)
	var last error
	for {
		select {
		case <-pctx.Done():
			return fail(last)
		case <-timer.C:
		}
		ok, err := probeOnce(pctx, client, url, wantStatus)
		if ok {
			return nil
		}
		last = err
		timer.Reset(wait)
		wait = min(2*wait, interval)
	}
}

// ReadyPhases are how often ProbeReady asks: every millisecond for the
// first 50 ms (a stand-in or a warm server is ready within a few, and each
// millisecond more is a millisecond of every run), then from 1 ms apart
// doubling up to 5 ms until a second has passed. A refused connection on
// loopback costs tens of microseconds.
var ReadyPhases = []struct{ Until, Interval time.Duration }{
	{50 * time.Millisecond, time.Millisecond},
	{time.Second, 5 * time.Millisecond},
}

// ProbeReady is Probe as often as ReadyPhases say, from now, then every
// slow apart until it answers wantStatus, exited closes or ctx ends.
func ProbeReady(ctx context.Context, url string, wantStatus int, slow time.Duration, exited <-chan struct{}) error {
	start := time.Now()
	for _, ph := range ReadyPhases {
		phase, cancel := context.WithDeadline(ctx, start.Add(ph.Until))
		err := Probe(phase, url, wantStatus, ph.Interval, exited)
		cancel()
		if err == nil || errors.Is(err, ErrExited) || ctx.Err() != nil {
			return err
		}
	}
	return Probe(ctx, url, wantStatus, slow, exited)
}

func probeOnce(ctx context.Context, client *http.Client, url string, want int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != want {
		return false, fmt.Errorf("status %d, want %d", resp.StatusCode, want)
	}
	return true, nil
}
