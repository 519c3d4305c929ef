package launch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// statusServer answers 503 to the first `failures` requests and 200 after
// (never 200 when failures < 0), counting requests.
func statusServer(t *testing.T, failures int64) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := hits.Add(1)
		if failures < 0 || n <= failures {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestProbeSucceedsOnWantedStatus(t *testing.T) {
	srv, hits := statusServer(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := Probe(ctx, srv.URL+"/health", http.StatusOK, 10*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("%d requests, want 3 (two 503s, then 200)", n)
	}
}

// The waits start at ProbeFirstWait and double: four failures cost
// 1+2+4+8 ms, never the hour-long interval, which only caps them.
func TestProbeBacksOffFromFirstWait(t *testing.T) {
	srv, hits := statusServer(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := Probe(ctx, srv.URL+"/health", http.StatusOK, time.Hour, nil); err != nil {
		t.Fatalf("Probe with a one-hour interval: %v (it waited the interval, not the doubling waits)", err)
	}
	if n := hits.Load(); n != 5 {
		t.Errorf("%d requests, want 5 (four 503s, then 200)", n)
	}
}

func TestProbeRespectsDeadline(t *testing.T) {
	unavailable, _ := statusServer(t, -1)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })
	for name, url := range map[string]string{"503": unavailable.URL, "hanging": hanging.URL} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := Probe(ctx, url, http.StatusOK, 10*time.Millisecond, nil)
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrExited) {
				t.Fatalf("Probe = %v, want a deadline error", err)
			}
		})
	}
}

func TestProbeFailsFastWhenProcessExits(t *testing.T) {
	srv, hits := statusServer(t, -1)
	l := newLauncher(t, false)
	dir := t.TempDir()
	p := start(t, l, childSpec(t, "sleep", dir))
	ctx, cancel := context.WithTimeout(context.Background(), 10*waitLong)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- Probe(ctx, srv.URL, http.StatusOK, 10*time.Millisecond, p.Done()) }()
	waitFor(t, "a first probe", func() (bool, error) { return hits.Load() > 0, nil })
	if _, err := Signal(nil, p.Identity, "server", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-result // bounded by ctx
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Probe = %v, want ErrExited", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Probe returned only when its context ended: %v", err)
	}
}

func TestProbeChildServer(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	p := start(t, l, childSpec(t, "serve", dir))
	_, port := waitReady(t, filepath.Join(dir, "ready"))
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	if err := Probe(ctx, url, http.StatusOK, 10*time.Millisecond, p.Done()); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := Probe(short, url, http.StatusNoContent, 10*time.Millisecond, p.Done()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Probe for a status the server never sends = %v, want a deadline error", err)
	}
}

func TestProbeBadURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := Probe(ctx, "http://[::1", http.StatusOK, 0, nil); err == nil || ctx.Err() != nil {
		t.Fatalf("Probe of a malformed URL = %v; want an immediate error", err)
	}
}

// ProbeReady asks as often as ReadyPhases say before the slow interval:
// thirty failures are passed within the phases, never waiting the hour.
func TestProbeReadyAsksOftenFirst(t *testing.T) {
	srv, hits := statusServer(t, 30)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := ProbeReady(ctx, srv.URL+"/health", http.StatusOK, time.Hour, nil); err != nil {
		t.Fatalf("ProbeReady with a one-hour slow interval: %v", err)
	}
	if n := hits.Load(); n != 31 {
		t.Errorf("%d requests, want 31 (thirty 503s, then 200)", n)
	}
	exited := make(chan struct{})
	close(exited)
	unavailable, _ := statusServer(t, -1)
	if err := ProbeReady(ctx, unavailable.URL+"/health", http.StatusOK, time.Hour, exited); !errors.Is(err, ErrExited) {
		t.Errorf("a process that exited: %v, want ErrExited", err)
	}
}
