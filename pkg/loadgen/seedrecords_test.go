package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestSeedStatusTaxonomy: every class maps onto section 12's spelling,
// one to one and in its order; a class outside it, or none, is
// harness-error.
func TestSeedStatusTaxonomy(t *testing.T) {
	want := []string{"success", "quality-failed", "client-cancelled", "deadline-exceeded", "admission-rejected",
		"OOM", "worker-lost", "transport-error", "invalid-output", "harness-error"}
	if got := SeedStatuses(); !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	for _, c := range []Class{"", "timeout", "Success"} {
		if got := SeedStatus(c); got != "harness-error" {
			t.Errorf("SeedStatus(%q) = %q, want harness-error", c, got)
		}
	}
}

// readLines decodes every line of a JSON-lines file into T.
func readLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRequestDeadlineEndsStalledRequests: a server that sends one token
// and then holds the stream open. With a deadline each request is ended
// at its deadline from the planned send, deadline-exceeded, and the
// drain ends with nothing abandoned; the seed's records say so.
func TestRequestDeadlineEndsStalledRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
		w.Write([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	dir := t.TempDir()
	const deadline = 150 * time.Millisecond
	cfg := Config{BaseURL: srv.URL, Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 2,
		IgnoreEOS: true, CleanSegment: 200 * time.Millisecond, NumClean: 1, DrainTimeout: 20 * time.Second,
		ResultDir: dir, RequestDeadline: deadline, SeedRecords: true, RunID: "run-1", RunAttempt: 3}
	res, err := Run(context.Background(), cfg, smallManifest(t, 50))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if res.Drain.Abandoned != 0 || res.Drain.TimedOut || res.Totals.Admitted == 0 || res.Totals.ByClass[DeadlineExceeded] != res.Totals.Admitted {
		t.Fatalf("drain %+v, admitted %d, classes %v", res.Drain, res.Totals.Admitted, res.Totals.ByClass)
	}
	sr := res.SeedRecords
	if sr == nil || sr.Planned != res.Totals.Admitted || sr.Sent != sr.Planned || sr.Unsent != 0 ||
		sr.ByStatus["deadline-exceeded"] != sr.Planned || sr.DeadlineS != deadline.Seconds() || sr.RunID != "run-1" {
		t.Fatalf("seed records %+v", sr)
	}
	reqs := readLines[SeedRequest](t, filepath.Join(dir, SeedRequestsFile))
	if len(reqs) != sr.Requests {
		t.Fatalf("%d lines, result.json says %d", len(reqs), sr.Requests)
	}
	for _, q := range reqs {
		if q.Status != "deadline-exceeded" || q.DeadlineMonoNS != q.PlannedMonoNS+int64(deadline) || q.EndMonoNS < q.DeadlineMonoNS ||
			q.FirstTokenMonoNS == 0 || q.RunAttempt != 3 || q.Attempt != 1 || q.SessionID != nil {
			t.Fatalf("request %+v", q)
		}
	}
}

// TestDeadlinePassedBeforeSend: a request whose deadline passed while it
// waited is never handed to the transport; it is deadline-exceeded and
// not sent.
func TestDeadlinePassedBeforeSend(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	clock, err := NewClock()
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cfg: Config{RequestDeadline: time.Second}, clock: clock,
		sender: &sender{client: newClient(newTransport(1)), url: srv.URL, clock: clock}}
	o := r.sendBy(context.Background(), []byte("{}"), expect{}, clock.Now()-int64(2*time.Second))
	if o.class != DeadlineExceeded || !o.unsent || o.end == 0 || hits.Load() != 0 {
		t.Fatalf("outcome %+v, server hits %d", o, hits.Load())
	}
}

// TestUnsentFromTheSchedule: an open loop's requests planned before the
// end of admission and never admitted are listed, each once, with its
// planned time; those admitted and those planned later are not.
func TestUnsentFromTheSchedule(t *testing.T) {
	m := smallManifest(t, 20)
	r := &run{cfg: Config{Rate: 10, Arrival: Arrival{Kind: "steady"}}, m: m, t0: 1000}
	admitted := []*slot{{rec: Record{Row: 0}}, {rec: Record{Row: 2}}}
	closedAt := r.t0 + int64(550*time.Millisecond)
	got, err := r.unsent(admitted, closedAt)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPlanner(r.cfg.Arrival, 10, 0)
	var want []int
	for i := 0; i < m.Len(); i++ {
		if r.t0+int64(p.Next()) >= closedAt {
			break
		}
		if i != 0 && i != 2 {
			want = append(want, i)
		}
	}
	var rows []int
	for _, s := range got {
		rows = append(rows, s.rec.Row)
		if s.rec.Class != HarnessError || s.rec.PlannedNS >= closedAt || s.rec.SentNS != 0 || s.rec.ID != m.ID(s.rec.Row) {
			t.Fatalf("unsent record %+v", s.rec)
		}
	}
	if len(want) < 3 || !slices.Equal(rows, want) {
		t.Fatalf("unsent rows %v, want %v", rows, want)
	}
	r.cfg.Rate = 0
	if got, _ := r.unsent(nil, closedAt); got != nil {
		t.Fatalf("a closed loop listed %d unsent requests", len(got))
	}
}
