package loadgen

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestRequestDeadlineEndsStalledRequests: a server that sends one token
// and then holds the stream open. With a deadline each request is ended
// at its deadline from the planned send, deadline-exceeded, and the
// drain ends with nothing abandoned; the seed's records say so.
func TestRequestDeadlineEndsStalledRequests(t *testing.T) {
	url := stalledServer(t, nil)
	dir := t.TempDir()
	const deadline = 150 * time.Millisecond
	cfg := Config{BaseURL: url, Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 2,
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
		sr.ByStatus["deadline-exceeded"] != sr.Planned || sr.DeadlineS != deadline.Seconds() || sr.RunID != "run-1" ||
		res.Timeline.RequestDeadlineS != deadline.Seconds() {
		t.Fatalf("seed records %+v", sr)
	}
	reqs, err := readSeedLines[SeedRequest](filepath.Join(dir, SeedRequestsFile))
	if err != nil || len(reqs) != sr.Requests {
		t.Fatalf("%d lines, result.json says %d: %v", len(reqs), sr.Requests, err)
	}
	if err := VerifySeedRecords(dir, sr); err != nil {
		t.Fatal(err)
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
		sender: testSenders(t, srv.URL, clock)["h1"]}
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

// stalledServer sends one token and holds every stream open until the
// client ends it; ended, when not nil, is called as each stream ends.
func stalledServer(t *testing.T, ended func()) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
		w.Write([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		if ended != nil {
			ended()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSeedRecordsOfAbandonedRequests: without a deadline, requests
// outstanding at the drain bound are abandoned: deadline-exceeded, no
// end of their own, their terminal event when the records froze, after
// every other event of theirs.
func TestSeedRecordsOfAbandonedRequests(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{BaseURL: stalledServer(t, nil), Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 2,
		IgnoreEOS: true, CleanSegment: 100 * time.Millisecond, NumClean: 1, DrainTimeout: 100 * time.Millisecond,
		ResultDir: dir, SeedRecords: true, RunID: "run-2"}
	res, err := Run(context.Background(), cfg, smallManifest(t, 10))
	if !errors.Is(err, ErrDrainAbandoned) || res == nil || res.SeedRecords == nil {
		t.Fatalf("Run = %v", err)
	}
	if err := VerifySeedRecords(dir, res.SeedRecords); err != nil {
		t.Fatal(err)
	}
	reqs, err := readSeedLines[SeedRequest](filepath.Join(dir, SeedRequestsFile))
	evs, err2 := readSeedLines[SeedEvent](filepath.Join(dir, SeedEventsFile))
	if err != nil || err2 != nil || len(reqs) != 2 || res.SeedRecords.ByStatus["deadline-exceeded"] != 2 {
		t.Fatalf("%d requests, %v %v, %+v", len(reqs), err, err2, res.SeedRecords)
	}
	for _, e := range evs {
		if e.Event == EventTerminal && (e.MonoNS < res.Drain.EndMonoNS || e.Status != "deadline-exceeded") {
			t.Fatalf("terminal %+v before the drain's end %d", e, res.Drain.EndMonoNS)
		}
	}
	for _, q := range reqs {
		if q.EndMonoNS != 0 || !q.Sent || q.DeadlineMonoNS != 0 {
			t.Fatalf("request %+v", q)
		}
	}
}

// TestSeedRecordsWriteFails: a requests.jsonl that cannot be put in place
// fails the run's write: an error, and no result.json.
func TestSeedRecordsWriteFails(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, SeedRequestsFile, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(raw(`{"choices":[{"text":"a"}]}`, `{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":4}}`))
	defer srv.Close()
	cfg := Config{BaseURL: srv.URL, Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 1,
		CleanSegment: 50 * time.Millisecond, NumClean: 1, DrainTimeout: time.Second, ResultDir: dir, SeedRecords: true, RunID: "r"}
	if res, err := Run(context.Background(), cfg, smallManifest(t, 1000)); err == nil || res != nil {
		t.Fatalf("Run = %v, %v; want a write error", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("result.json after a failed write: %v", err)
	}
}

// TestVerifySeedRecordsFaults: each way the files can be incomplete or
// inconsistent is caught.
func TestVerifySeedRecordsFaults(t *testing.T) {
	src := t.TempDir()
	cfg := Config{BaseURL: stalledServer(t, nil), Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 2,
		IgnoreEOS: true, CleanSegment: 100 * time.Millisecond, NumClean: 1, DrainTimeout: 10 * time.Second,
		ResultDir: src, SeedRecords: true, RunID: "run-3", RequestDeadline: 30 * time.Millisecond}
	res, err := Run(context.Background(), cfg, smallManifest(t, 200))
	if err != nil || res.SeedRecords.Planned < 2 {
		t.Fatalf("Run = %v, %+v", err, res.SeedRecords)
	}
	lines := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	reqs, evs := lines(SeedRequestsFile), lines(SeedEventsFile)
	for _, tc := range []struct {
		name      string
		reqs, evs []string
		info      func(SeedRecordsInfo) *SeedRecordsInfo
		want      string
	}{
		{"sound", reqs, evs, nil, ""},
		{"events cut short", reqs, evs[:len(evs)-1], nil, "ends before"},
		{"a request line lost", reqs[1:], evs, nil, "lines"},
		{"a request listed twice", append([]string{reqs[0]}, reqs[:len(reqs)-1]...), evs, nil, "row"},
		{"events out of order", reqs, append([]string{evs[1], evs[0]}, evs[2:]...), nil, "planned send"},
		{"a terminal's status changed", reqs, append(append([]string{}, evs[:len(evs)-1]...),
			strings.Replace(evs[len(evs)-1], "deadline-exceeded", "success", 1)), nil, "terminal"},
		{"counts differ", reqs, evs, func(i SeedRecordsInfo) *SeedRecordsInfo { i.ByStatus = map[string]int{}; return &i }, "result.json says"},
		{"no block", reqs, evs, func(SeedRecordsInfo) *SeedRecordsInfo { return nil }, "no seed_records"},
	} {
		dir := t.TempDir()
		for name, ls := range map[string][]string{SeedRequestsFile: tc.reqs, SeedEventsFile: tc.evs} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(ls, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		info := res.SeedRecords
		if tc.info != nil {
			info = tc.info(*res.SeedRecords)
		}
		err := VerifySeedRecords(dir, info)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
