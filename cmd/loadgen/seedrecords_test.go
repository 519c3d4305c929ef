package main

// The methodology's raw traces end to end: bin/loadgen against the
// stand-in streaming audio on loopback, then requests.jsonl and
// events.jsonl read back against result.json and the schedule.

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"warden/pkg/loadgen"
)

// readJSONL decodes every line of a JSON-lines file.
func readJSONL[T any](t *testing.T, path string) []T {
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

// plannedRows is how many rows a steady open loop at rate planned before
// the end of admission (the drain's start), replayed from the schedule,
// and that instant.
func plannedRows(t *testing.T, res loadgen.Result, rate float64) (int, int64) {
	t.Helper()
	var closedAt int64
	for _, s := range res.Segments {
		if s.Kind == loadgen.PhaseDrain {
			closedAt = s.StartMonoNS
		}
	}
	p, err := loadgen.NewPlanner(loadgen.Arrival{Kind: "steady"}, rate, 0)
	if err != nil || closedAt == 0 {
		t.Fatalf("planner %v, admission end %d", err, closedAt)
	}
	n := 0
	for n < res.Manifest.Rows && res.Clock.T0MonoNS+int64(p.Next()) < closedAt {
		n++
	}
	return n, closedAt
}

// checkSeedFiles checks the two files against result.json and the
// schedule: every planned request once, in row order, with a status of
// the taxonomy (a request planned at the end of admission itself counts
// when the client sent it); each request's events in time order, planned first,
// first output after the send, one terminal last with the request's
// status. It returns the request lines and their events by request id.
func checkSeedFiles(t *testing.T, dir string, res loadgen.Result, rate float64, runID string) ([]loadgen.SeedRequest, map[string][]loadgen.SeedEvent) {
	t.Helper()
	sr := res.SeedRecords
	if sr == nil || sr.RunID != runID {
		t.Fatalf("seed records %+v", sr)
	}
	if err := loadgen.VerifySeedRecords(dir, sr); err != nil {
		t.Fatal(err)
	}
	reqs := readJSONL[loadgen.SeedRequest](t, filepath.Join(dir, sr.RequestsFile))
	evs := readJSONL[loadgen.SeedEvent](t, filepath.Join(dir, sr.EventsFile))
	planned, closedAt := plannedRows(t, res, rate)
	for planned < len(reqs) && reqs[planned].Sent && reqs[planned].PlannedMonoNS >= closedAt {
		planned++
	}
	if len(reqs) != sr.Requests || len(evs) != sr.Events || sr.Planned != planned || len(reqs) != planned ||
		sr.Sent+sr.Unsent != planned || sr.Sent > res.Totals.Admitted {
		t.Fatalf("%d request lines, %d events, %d planned by the schedule; result.json %+v, admitted %d",
			len(reqs), len(evs), planned, sr, res.Totals.Admitted)
	}
	taxonomy := map[string]bool{}
	for _, s := range loadgen.SeedStatuses() {
		taxonomy[s] = true
	}
	byStatus := map[string]int{}
	byReq := map[string][]loadgen.SeedEvent{}
	for _, e := range evs {
		byReq[e.RequestID] = append(byReq[e.RequestID], e)
	}
	for i, q := range reqs {
		if q.Row != i || q.RunID != runID || q.RunAttempt != 2 || q.Schema != loadgen.SeedRequestSchema || !taxonomy[q.Status] {
			t.Fatalf("line %d: %+v", i, q)
		}
		byStatus[q.Status]++
		checkEvents(t, q, byReq[q.RequestID])
	}
	for s, n := range sr.ByStatus {
		if byStatus[s] != n || !taxonomy[s] {
			t.Fatalf("result.json counts %d %s, the file %d", n, s, byStatus[s])
		}
	}
	return reqs, byReq
}

// checkEvents checks one request's events against its line.
func checkEvents(t *testing.T, q loadgen.SeedRequest, evs []loadgen.SeedEvent) {
	t.Helper()
	if len(evs) != q.Events || len(evs) < 2 || evs[0].Event != loadgen.EventPlanned || evs[0].MonoNS != q.PlannedMonoNS {
		t.Fatalf("request %s (%d events said): %+v", q.RequestID, q.Events, evs)
	}
	last := evs[len(evs)-1]
	if last.Event != loadgen.EventTerminal || last.Status != q.Status || (q.EndMonoNS != 0 && last.MonoNS != q.EndMonoNS) {
		t.Fatalf("request %s: terminal %+v, line %+v", q.RequestID, last, q)
	}
	var prev time.Time
	for i, e := range evs {
		w, err := time.Parse(time.RFC3339Nano, e.WallTime)
		if err != nil || e.RunID != q.RunID || e.Stage != loadgen.StageClient || e.Attempt != 1 ||
			(i > 0 && (e.MonoNS < evs[i-1].MonoNS || w.Before(prev))) || (i < len(evs)-1 && e.Status != loadgen.StatusOK) {
			t.Fatalf("request %s event %d out of order or inconsistent: %+v", q.RequestID, i, e)
		}
		prev = w
		switch e.Event {
		case loadgen.EventSent:
			if !q.Sent || e.MonoNS != q.SentMonoNS || e.MonoNS < q.PlannedMonoNS {
				t.Fatalf("request %s: sent event %+v, line %+v", q.RequestID, e, q)
			}
		case loadgen.EventFirstToken, loadgen.EventOutputChunk:
			if !q.Sent || e.MonoNS < q.SentMonoNS {
				t.Fatalf("request %s: output %+v before its send %d", q.RequestID, e, q.SentMonoNS)
			}
		}
	}
}

// seedRun runs bin/loadgen, chat with text and audio, open loop, against
// url and returns the result directory and result.
func seedRun(t *testing.T, url, runID string, rate float64, conc int, extra ...string) (string, loadgen.Result) {
	t.Helper()
	dir := t.TempDir()
	resDir := filepath.Join(dir, "client")
	args := append([]string{"run", "--manifest", textManifest(t, dir, 400), "--base-url", url, "--model", "m",
		"--endpoint", "chat", "--modalities", "text,audio", "--server-kind", "vllm-omni", "--load-point", "omni",
		"--request-rate", strconv.FormatFloat(rate, 'g', -1, 64), "--max-concurrency", strconv.Itoa(conc), "--ignore-eos",
		"--result-dir", resDir}, shortTimeline("10")...)
	code, out := loadgenRun(t, []string{"WARDEN_RUN_ID=" + runID, "WARDEN_ATTEMPT=2"}, append(args, extra...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	return resDir, readResult(t, resDir)
}

// TestSeedRecordsHealthyAudio: every planned request of an omni load is
// sent and succeeds; its audio chunks are events with their bytes,
// samples and rate, consistent with its line.
func TestSeedRecordsHealthyAudio(t *testing.T) {
	url := startStandin(t, "1", "--server-kind", "vllm-omni")
	dir, res := seedRun(t, url, "run-a", 10, 8)
	reqs, evs := checkSeedFiles(t, dir, res, 10, "run-a")
	if res.SeedRecords.Unsent != 0 || res.SeedRecords.ByStatus["success"] != len(reqs) {
		t.Fatalf("seed records %+v", res.SeedRecords)
	}
	for _, q := range reqs {
		n, samples := 0, int64(0)
		for _, e := range evs[q.RequestID] {
			if e.Event == loadgen.EventOutputChunk {
				if e.ChunkID == nil || *e.ChunkID != n || e.SampleRate != 24000 || e.Bytes <= 44 {
					t.Fatalf("request %s chunk %d: %+v", q.RequestID, n, e)
				}
				n++
				samples += e.Samples
			}
		}
		if !q.Sent || n != 4 || q.AudioChunks != 4 || samples != q.Samples || q.Samples != 4*2400 || q.SampleRate != 24000 ||
			q.FirstAudioMonoNS < q.SentMonoNS || q.DeadlineMonoNS != 0 {
			t.Fatalf("request %+v: %d chunk events of %d samples", q, n, samples)
		}
	}
}

// TestSeedRecordsDeadline: the stand-in stalls 1 s before the third
// audio chunk; with a 0.4 s deadline from the planned send every sent
// request is ended deadline-exceeded, before its third chunk (never
// abandoned: the drain ends with none outstanding), and with one request at a time the generator
// falls behind: the requests planned and never sent are recorded
// harness-error, not sent, with their lag.
func TestSeedRecordsDeadline(t *testing.T) {
	url := startStandin(t, "1", "--server-kind", "vllm-omni", "--audio-stall-s", "1", "--audio-fault-chunk", "2")
	dir, res := seedRun(t, url, "run-b", 20, 1, "--request-deadline-s", "0.4")
	reqs, _ := checkSeedFiles(t, dir, res, 20, "run-b")
	sr := res.SeedRecords
	if res.Drain.Abandoned != 0 || sr.DeadlineS != 0.4 || sr.Sent == 0 || sr.Unsent == 0 || sr.UnsentLag.N != sr.Unsent {
		t.Fatalf("drain %+v, seed records %+v", res.Drain, sr)
	}
	for _, q := range reqs {
		if q.DeadlineMonoNS != q.PlannedMonoNS+int64(400*time.Millisecond) {
			t.Fatalf("request %s: deadline %d, planned %d", q.RequestID, q.DeadlineMonoNS, q.PlannedMonoNS)
		}
		switch {
		case q.Sent:
			if q.Status != "deadline-exceeded" || q.EndMonoNS < q.DeadlineMonoNS || q.AudioChunks > 2 {
				t.Fatalf("sent request %+v", q)
			}
		case q.Status == "harness-error":
			if q.SentMonoNS != 0 || q.EndMonoNS != 0 || q.GeneratorLagNS <= 0 {
				t.Fatalf("unsent request %+v", q)
			}
		case q.Status != "deadline-exceeded":
			t.Fatalf("unsent request %+v", q)
		}
	}
}
