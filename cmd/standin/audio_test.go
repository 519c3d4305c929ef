package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/contract"
	"warden/pkg/gates"
	"warden/pkg/loadgen"
)

// audioRun runs loadgen (chat, text and audio) against a stand-in of kind
// with args, then the waveform check; it returns the result, the request
// records and the verdict.
func audioRun(t *testing.T, h *harness, kind string, args ...string) (*loadgen.Result, []loadgen.Record, contract.Result) {
	t.Helper()
	s := h.healthyServer(append([]string{"--load-s", "0", "--server-kind", kind}, args...)...)
	dir := t.TempDir()
	var lines []string
	for i := 0; i < 4000; i++ {
		lines = append(lines, fmt.Sprintf(`{"id":"r%d","prompt":"say something","input_tokens":2,"output_tokens":3,"arrival":"steady"}`, i))
	}
	mpath := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(mpath, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.OpenManifest(mpath)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sk, err := loadgen.ParseServerKind(kind)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "client")
	cfg := loadgen.Config{BaseURL: s.url, Model: "standin", Endpoint: loadgen.Chat, ServerKind: sk, LoadPoint: "saturation",
		MaxConcurrency: 2, IgnoreEOS: true, CleanSegment: 500 * time.Millisecond, NumClean: 1, DrainTimeout: 5 * time.Second,
		ResultDir: out, Modalities: []string{"text", "audio"}}
	res, err := loadgen.Run(context.Background(), cfg, m)
	if err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	var recs []loadgen.Record
	for _, f := range res.Files.Requests {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			var r loadgen.Record
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
	}
	return res, recs, contract.WaveformDir(out)
}

// checkFigures asserts the relations every audio record must keep, from
// its own recorded numbers: text before audio (TTFA >= TTFT), RTF and x_RT
// from JCT and D_audio, D_audio from the samples, the gaps from the chunk
// times.
func checkFigures(t *testing.T, r loadgen.Record, rate int) {
	t.Helper()
	a := r.Audio
	if a == nil || len(a.Chunks) == 0 || a.FirstAudioNS == 0 {
		t.Fatalf("request %s: no audio record: %+v", r.ID, a)
	}
	if r.FirstTokenNS == 0 || a.FirstAudioNS <= r.FirstTokenNS || a.FirstAudioNS > r.EndNS {
		t.Fatalf("request %s: first token %d, first audio %d, end %d: the stand-in sends text before audio", r.ID, r.FirstTokenNS, a.FirstAudioNS, r.EndNS)
	}
	var samples int64
	var maxGap int64
	var last int64
	for _, c := range a.Chunks {
		samples += c.Samples
		if c.Samples < a.MinSamples {
			continue
		}
		if last != 0 && c.AtNS-last > maxGap {
			maxGap = c.AtNS - last
		}
		last = c.AtNS
	}
	jct := float64(r.EndNS-r.SentNS) / 1e9
	if a.Samples != samples || a.DurationS != float64(samples)/float64(rate) || a.RTF != jct/a.DurationS || a.XRT != a.DurationS/jct ||
		a.TTFAMS != float64(a.FirstAudioNS-r.SentNS)/1e6 || a.Gaps.Max != float64(maxGap)/1e6 {
		t.Fatalf("request %s: figures %+v disagree with its chunks (samples %d, jct %v s, max gap %d ns)", r.ID, a, samples, jct, maxGap)
	}
}

// TestAudioStreamsEndToEnd: loadgen reads the stand-in's vLLM-Omni and
// SGLang-Omni audio streams; the waveform check passes the sound ones and
// catches each broken one, whose requests loadgen marked invalid-output.
func TestAudioStreamsEndToEnd(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, kind string
		args       []string
		verdict    string
		rule       string // in the verdict's detail and the records' reason
	}{
		{"vllm-omni sound", "vllm-omni", nil, gates.Pass, ""},
		{"sglang-omni sound with offsets", "sglang-omni", []string{"--audio-offsets"}, gates.Pass, ""},
		{"dropped samples", "vllm-omni", []string{"--audio-offsets", "--audio-drop-samples", "7"}, gates.Fail, "offsets"},
		{"repeated samples", "sglang-omni", []string{"--audio-offsets", "--audio-dup-samples", "5"}, gates.Fail, "offsets"},
		{"cut chunk", "sglang-omni", []string{"--audio-truncate-samples", "3"}, gates.Fail, "header_length"},
		{"rate change", "vllm-omni", []string{"--audio-rate-change", "16000"}, gates.Fail, "format_constant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, recs, v := audioRun(t, h, tc.kind, tc.args...)
			if v.Verdict != tc.verdict || !strings.Contains(v.Detail, tc.rule) {
				t.Fatalf("verdict %s (%s), want %s naming %q", v.Verdict, v.Detail, tc.verdict, tc.rule)
			}
			ended := 0
			for _, r := range recs {
				if r.Class != loadgen.Success && r.Class != loadgen.InvalidOutput {
					continue
				}
				ended++
				if tc.verdict == gates.Pass {
					if r.Class != loadgen.Success {
						t.Fatalf("request %s: %s (%s) on a sound stream", r.ID, r.Class, r.Reason)
					}
					checkFigures(t, r, 24000)
				} else if r.Class != loadgen.InvalidOutput || !strings.Contains(r.Reason, tc.rule) {
					t.Fatalf("request %s: %s (%s), want invalid-output by %s", r.ID, r.Class, r.Reason, tc.rule)
				}
			}
			if ended == 0 || v.Figures["audio_requests"] != float64(ended) {
				t.Fatalf("%d requests ended, the check saw %v", ended, v.Figures)
			}
			if tc.verdict == gates.Pass && (res.Audio == nil || res.Audio.Requests == 0 || res.Audio.RTF.N != res.Audio.Requests ||
				res.Audio.TTFA.P50 < res.Clean.Latency.TTFT.P50) {
				t.Fatalf("result.json audio %+v, text TTFT %+v", res.Audio, res.Clean.Latency.TTFT)
			}
		})
	}
}

// soundAudioRun is audioRun on a new harness whose waveform check must
// pass; it returns the result and the records of the requests that
// succeeded.
func soundAudioRun(t *testing.T, kind string, args ...string) (*loadgen.Result, []loadgen.Record) {
	t.Helper()
	res, recs, v := audioRun(t, newHarness(t), kind, args...)
	if v.Verdict != gates.Pass {
		t.Fatalf("verdict %s: %s", v.Verdict, v.Detail)
	}
	var ok []loadgen.Record
	for _, r := range recs {
		if r.Class == loadgen.Success {
			ok = append(ok, r)
		}
	}
	return res, ok
}

// TestAudioHeaderOnlyFirstChunk: a first audio chunk of a WAV header and
// no samples is recorded, but TTFA is the next chunk's, the first with a
// sample.
func TestAudioHeaderOnlyFirstChunk(t *testing.T) {
	_, ok := soundAudioRun(t, "vllm-omni", "--audio-header-only-first")
	for _, r := range ok {
		c := r.Audio.Chunks
		if len(c) != 5 || c[0].Samples != 0 || c[0].Bytes != 44 || c[1].Samples == 0 || r.Audio.FirstAudioNS != c[1].AtNS {
			t.Fatalf("request %s: chunks %+v, first audio %d", r.ID, c, r.Audio.FirstAudioNS)
		}
		checkFigures(t, r, 24000)
	}
	if len(ok) == 0 {
		t.Fatal("no request succeeded")
	}
}

// TestAudioStall: a stall before the third chunk is the request's largest
// chunk gap, at that boundary, and the run's gap maximum; the waveform is
// sound.
func TestAudioStall(t *testing.T) {
	res, ok := soundAudioRun(t, "sglang-omni", "--audio-stall-s", "0.25", "--audio-fault-chunk", "2")
	for _, r := range ok {
		checkFigures(t, r, 24000)
		c := r.Audio.Chunks
		at, maxGap := 0, int64(0)
		for i := 1; i < len(c); i++ {
			if g := c[i].AtNS - c[i-1].AtNS; g > maxGap {
				at, maxGap = i, g
			}
		}
		if at != 2 {
			t.Fatalf("request %s: largest gap before chunk %d (%d ns), want 2", r.ID, at, maxGap)
		}
	}
	if len(ok) == 0 || res.Audio.Gaps.Max < res.Audio.Gaps.P99 || res.Audio.GapCV <= 0 {
		t.Fatalf("%d successes, run gaps %+v cv %v", len(ok), res.Audio.Gaps, res.Audio.GapCV)
	}
}

// TestAudioDropWithoutOffsets: without offsets (neither real server sends
// them) samples skipped at a boundary under consistent headers are not
// visible in the stream; the check passes, as docs/validators.md says.
func TestAudioDropWithoutOffsets(t *testing.T) {
	soundAudioRun(t, "vllm-omni", "--audio-drop-samples", "7")
}
