package contract

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Benchmarks on the seed's sizes: a 600 s Layer-1 stream at 50 steps/s
// (30,000 records) and a 16 MB gzip Kineto trace (the P2 trace was 16.4 MB).

func writeLayer1Stream(b *testing.B, dir string, n int) (string, time.Time) {
	b.Helper()
	p := filepath.Join(dir, "layer1.jsonl")
	fh, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	buf := bufio.NewWriterSize(fh, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		// about the width of a real record: the seed's counters and histograms
		fmt.Fprintf(buf, `{"schema":1,"step":%d,"model_executed":true,"submit_mono_ns":%d,"complete_mono_ns":%d,"num_scheduled_reqs":%d,"num_prefill_reqs":%d,"num_decode_reqs":%d,"prefill_tokens":%d,"decode_tokens":%d,"chunked_prefill_class":%q,"chunk_size_hist":[%d,%d,%d,%d],"context_len_hist":[%d,%d,%d,%d,%d,%d],"num_waiting_reqs":%d,"num_running_reqs":%d,"num_deferred_reqs":%d,"num_preemptions":0,"kv_cache_usage":%.4f,"prefix_cache_queries":%d,"prefix_cache_hits":%d,"cuda_graph_hit":true,"runtime_mode":"FULL","unpadded_tokens":%d,"bucket_tokens":%d,"padding_tokens":%d}`+"\n",
			i, int64(i)*20_000_000, int64(i)*20_000_000+15_000_000, rng.IntN(256), rng.IntN(8), rng.IntN(256), rng.IntN(8192), rng.IntN(256), []string{"none", "chunked"}[rng.IntN(2)],
			rng.IntN(9), rng.IntN(9), rng.IntN(9), rng.IntN(9), rng.IntN(99), rng.IntN(99), rng.IntN(99), rng.IntN(99), rng.IntN(99), rng.IntN(99),
			rng.IntN(500), rng.IntN(256), rng.IntN(4), rng.Float64(), rng.IntN(256), rng.IntN(256), 200, 256, 56)
	}
	if err := buf.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		b.Fatal(err)
	}
	wall := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	side := fmt.Sprintf(`{"encoded_records":%d,"written_records":%d,"dropped_records":0,"last_step_index":%d,"wall_time_unix_ns":%d,"flush_interval_s":1.0,"final":false}`, n, n, n-1, wall.UnixNano())
	if err := os.WriteFile(p+".footer.json", []byte(side), 0o644); err != nil {
		b.Fatal(err)
	}
	sig := fmt.Sprintf(`[{"at":%q,"role":"server","target":"group","pid":1,"signal":"SIGKILL"}]`, wall.Add(400*time.Millisecond).Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(dir, "signals.json"), []byte(sig), 0o644); err != nil {
		b.Fatal(err)
	}
	return p, wall
}

func BenchmarkLayer1_600s_50steps(b *testing.B) { benchLayer1(b, 30_000) }

// The 1M-record stream (about 370 MB): run with -benchtime 1x.
func BenchmarkLayer1_1M(b *testing.B) { benchLayer1(b, 1_000_000) }

func benchLayer1(b *testing.B, n int) {
	dir := b.TempDir()
	p, _ := writeLayer1Stream(b, dir, n)
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		if r := Layer1Files(p, "", filepath.Join(dir, "signals.json"), DefaultLayer1); r.Verdict != "pass" || r.Figures["records"] != float64(n) {
			b.Fatal(r)
		}
	}
}

// A moderate client run of 240 clean seconds at 50 requests/s: 12,000
// request records in three segment files.
func BenchmarkClient_12000Requests(b *testing.B) {
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "requests"), 0o755)
	var files []string
	for s := 1; s <= 3; s++ {
		var buf bytes.Buffer
		for k := range 4000 {
			fmt.Fprintf(&buf, `{"schema":"warden.loadgen.request/1","id":"r%d","row":%d,"segment":"clean-%d","admit_segment":"clean-%d","planned_mono_ns":%d,"sent_mono_ns":%d,"first_token_mono_ns":%d,"end_mono_ns":%d,"expected_input_tokens":300,"prompt_tokens":300,"requested_output_tokens":64,"output_tokens":64,"token_chunks":64,"itl_max_ns":40000000,"http_status":200,"class":"success"}`+"\n",
				k, (s-1)*4000+k, s, s, k*20e6, k*20e6+50000, k*20e6+9e7, k*20e6+2e9)
		}
		f := "requests/clean-" + strconv.Itoa(s) + ".jsonl"
		os.WriteFile(filepath.Join(dir, f), buf.Bytes(), 0o644)
		files = append(files, fmt.Sprintf("%q", f))
	}
	res := fmt.Sprintf(`{"schema":"warden.loadgen.result/1","complete":true,"load_point":"saturation","load":{"closed_loop":true},"timeline":{"clean_segment_s":80,"num_clean_segments":3},
"segments":[{"name":"clean-1","kind":"clean","seconds":80},{"name":"clean-2","kind":"clean","seconds":80},{"name":"clean-3","kind":"clean","seconds":80}],
"clean":{"seconds":240,"completed":12000,"completed_rps":50,"offered_rps":50},"lag":{"threshold_s":1},"drain":{"timed_out":false,"abandoned":0},"totals":{},"files":{"requests":[%s,%s,%s]}}`, files[0], files[1], files[2])
	os.WriteFile(filepath.Join(dir, "result.json"), []byte(res), 0o644)
	b.ReportAllocs()
	for b.Loop() {
		if r := ClientDir(dir, DefaultClient()); r.Verdict != "pass" {
			b.Fatal(r)
		}
	}
}

// The sanity block over the 30,000-record Layer-1 stream.
func BenchmarkSanity_Layer1Stream(b *testing.B) {
	dir := b.TempDir()
	p, _ := writeLayer1Stream(b, dir, 30_000)
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		if _, r := Sanity([]string{p}, dir, DefaultSanity()); r.Verdict != "pass" {
			b.Fatal(r)
		}
	}
}
