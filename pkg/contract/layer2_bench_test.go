package contract

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeBigRealTrace writes a gzip trace of at least size bytes from the
// real H200 window 0 (testdata/h200/eager): its ProfilerSteps and execute
// annotations once, every other event as many times as it takes, each copy
// with its own correlation ids (the same kernels launched again at the
// same times: the shares stay the window's). It returns the events.
func writeBigRealTrace(b *testing.B, path string, size int) int {
	b.Helper()
	src, _ := filepath.Glob(filepath.Join("testdata", "h200", "eager", "rank0_w0.*.pt.trace.json.gz"))
	f, err := os.Open(src[0])
	if err != nil {
		b.Fatal(err)
	}
	zr, _ := gzip.NewReader(f)
	var doc map[string]json.RawMessage
	if err := json.NewDecoder(zr).Decode(&doc); err != nil {
		b.Fatal(err)
	}
	f.Close()
	var evs []map[string]any
	if err := json.Unmarshal(doc["traceEvents"], &evs); err != nil {
		b.Fatal(err)
	}
	var once, rest []map[string]any
	for _, e := range evs {
		n, _ := e["name"].(string)
		if strings.HasPrefix(n, "ProfilerStep#") || strings.HasPrefix(n, "execute_") {
			once = append(once, e)
		} else {
			rest = append(rest, e)
		}
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write([]byte(`{"schemaVersion":1,"baseTimeNanoseconds":` + string(doc["baseTimeNanoseconds"]) + `,"traceEvents":[`))
	enc := json.NewEncoder(zw)
	n := 0
	write := func(e map[string]any) {
		if n > 0 {
			zw.Write([]byte(","))
		}
		enc.Encode(e)
		n++
	}
	for _, e := range once {
		write(e)
	}
	for c := 0; out.Len() < size; c++ {
		for _, e := range rest {
			if a, ok := e["args"].(map[string]any); ok && c > 0 {
				if corr, ok := a["correlation"].(float64); ok {
					cp := map[string]any{}
					for k, v := range a {
						cp[k] = v
					}
					cp["correlation"] = corr + float64(c)*1e7
					e2 := map[string]any{}
					for k, v := range e {
						e2[k] = v
					}
					e2["args"] = cp
					write(e2)
					continue
				}
			}
			write(e)
		}
		zw.Flush()
	}
	zw.Write([]byte(`]}`))
	zw.Close()
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkLayer2_16MBTrace: every Layer-2 rule (shape, mapping with
// scopes, join, SMD, modes) on one 16 MB gzip trace of real kernels.
// peak_heap_MB is the largest heap in use, sampled every 5 ms.
func BenchmarkLayer2_16MBTrace(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "rank0_w0.pt.trace.json.gz")
	n := writeBigRealTrace(b, p, 16<<20)
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	o := realOpts("eager")
	o.Windows = 1
	runtime.GC()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	})
	for b.Loop() {
		if r := Layer2Dir(dir, o); r.Verdict != "pass" {
			b.Fatal(r.Detail)
		}
	}
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(st.Size())/(1<<20), "gz_MB")
	b.ReportMetric(float64(n), "events")
	b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MB")
}

// BenchmarkTraceParse: the JSON pass alone over the decompressed 16 MB
// trace (about 190 MB of JSON), in memory: what the parser costs beside
// the inflate.
func BenchmarkTraceParse(b *testing.B) {
	p := filepath.Join(b.TempDir(), "rank0_w0.pt.trace.json.gz")
	writeBigRealTrace(b, p, 16<<20)
	raw := gunzipFile(b, p)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	o := realOpts("eager")
	scopes := DefaultMapping().scopeMatchers()
	for b.Loop() {
		d := &traceData{scopes: map[string][]scopeSpan{}}
		if err := parseTrace(d, bytes.NewReader(raw), o.ExecuteAnnotate, scopes); err != nil {
			b.Fatal(err)
		}
	}
}
