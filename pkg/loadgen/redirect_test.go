package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestSendNeverFollowsRedirect: a server answering 307 to another port
// gets the request once; the other port never sees the body, and the
// request is harness-error with the 3xx status.
func TestSendNeverFollowsRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		sse(w, 4, 4, true)
	}))
	defer other.Close()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, other.URL+"/v1/completions", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	clock, _ := NewClock()
	for name, s := range testSenders(t, srv.URL, clock) {
		asked.Store(0)
		o := s.send(context.Background(), []byte(`{"prompt":"private"}`), expect{output: 4, exact: true, input: 3})
		if o.class != HarnessError || o.status != http.StatusTemporaryRedirect || o.reason != "status 307" {
			t.Fatalf("%s: outcome %+v, want harness-error with status 307", name, o)
		}
		if elsewhere.Load() != 0 || asked.Load() != 1 {
			t.Fatalf("%s: redirect target asked %d times, server %d times; want 0 and 1", name, elsewhere.Load(), asked.Load())
		}
	}
}
