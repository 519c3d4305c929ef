package loadgen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// wav is a PCM WAV of n samples (per channel) whose header declares
// declared, with extra bytes appended after the data.
func wav(rate, channels, n, declared int, extra []byte) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	frame := 2 * channels
	b.WriteString("RIFF")
	le(uint32(36 + frame*declared))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(channels))
	le(uint32(rate))
	le(uint32(rate * frame))
	le(uint16(frame))
	le(uint16(16))
	b.WriteString("data")
	le(uint32(frame * declared))
	b.Write(make([]byte, frame*n))
	b.Write(extra)
	return b.Bytes()
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestReadWAV: the format and the samples present and declared, with
// chunks after the data skipped and garbage counted; what is not a PCM
// WAV is refused.
func TestReadWAV(t *testing.T) {
	list := append([]byte("LIST"), 4, 0, 0, 0, 'I', 'N', 'F', 'O')
	for _, tc := range []struct {
		name              string
		b                 []byte
		samples, declared int64
		rate, ch          int
		why               string
	}{
		{"mono", wav(24000, 1, 2400, 2400, nil), 2400, 2400, 24000, 1, ""},
		{"stereo", wav(16000, 2, 10, 10, nil), 10, 10, 16000, 2, ""},
		{"header only", wav(24000, 1, 0, 0, nil), 0, 0, 24000, 1, ""},
		{"cut", wav(24000, 1, 7, 10, nil), 7, 10, 24000, 1, ""},
		{"padded", wav(24000, 1, 10, 10, []byte{1, 2, 3, 4}), 12, 10, 24000, 1, ""},
		{"a chunk after the data", wav(24000, 1, 10, 10, list), 10, 10, 24000, 1, ""},
		{"not RIFF", []byte("ID3 not a wav file at all"), 0, 0, 0, 0, "not a WAV"},
		{"no data", wav(24000, 1, 0, 0, nil)[:36], 0, 0, 24000, 1, "no data"},
		{"not PCM", func() []byte { b := wav(24000, 1, 1, 1, nil); b[20] = 3; return b }(), 0, 0, 0, 0, "not PCM"},
	} {
		c, why := readWAV(tc.b)
		if !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
			t.Errorf("%s: why %q, want %q", tc.name, why, tc.why)
			continue
		}
		if tc.why == "" && (c.Samples != tc.samples || c.HeaderSamples != tc.declared || c.SampleRate != tc.rate || c.Channels != tc.ch || c.Bytes != len(tc.b)) {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

// TestReadChunkAudio: vLLM-Omni's audio chunk (modality audio, the WAV in
// the delta content) carries audio and no token; SGLang-Omni's (delta
// audio) carries audio; a text chunk of either carries a token.
func TestReadChunkAudio(t *testing.T) {
	for _, tc := range []struct {
		chunk string
		want  chunk
	}{
		{`{"choices":[{"delta":{"role":"assistant","content":"UklGRg=="},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":0},"modality":"audio"}`,
			chunk{choices: true, usage: true, promptTokens: 2, audio: true, audioModality: true}},
		{`{"choices":[{"delta":{"content":"hi"}}],"modality":"text"}`, chunk{token: true, choices: true}},
		{`{"choices":[{"delta":{"audio":{"id":"a","data":"UklGRg=="}}}]}`, chunk{choices: true, audio: true}},
		{`{"choices":[{"delta":{"audio":null}}]}`, chunk{choices: true}},
	} {
		for _, kind := range []ServerKind{ServerAuto, ServerVLLMOmni, ServerSGLangOmni} {
			if c, why := readChunk([]byte(tc.chunk), kind); c != tc.want || why != "" {
				t.Errorf("%s: readChunk(%s) = %+v %q, want %+v", kind, tc.chunk, c, why, tc.want)
			}
		}
	}
	for _, bad := range []string{`{"modality":1}`, `{"choices":[{"delta":{"audio":"x"}}]}`} {
		if _, why := readChunk([]byte(bad), ServerAuto); why != wrongType {
			t.Errorf("readChunk(%s): %q, want %q", bad, why, wrongType)
		}
	}
}

// TestSendAudio: a stream of text then audio chunks is a success with
// its audio recorded; a broken audio chunk, or chunks breaking an
// invariant, are invalid-output.
func TestSendAudio(t *testing.T) {
	text := `{"choices":[{"delta":{"content":"hi"}}]}`
	vllm := func(w []byte) string {
		return fmt.Sprintf(`{"choices":[{"delta":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":0},"modality":"audio"}`, b64(w))
	}
	sgl := func(w []byte, off int) string {
		return fmt.Sprintf(`{"choices":[{"delta":{"audio":{"id":"a","data":%q}}}],"audio_offset":%d}`, b64(w), off)
	}
	for _, tc := range []struct {
		name     string
		payloads []string
		class    Class
		reason   string
		chunks   int
	}{
		{"vllm-omni", []string{text, vllm(wav(24000, 1, 0, 0, nil)), vllm(wav(24000, 1, 100, 100, nil)), usage(3, 1)}, Success, "", 2},
		{"sglang-omni", []string{text, sgl(wav(24000, 1, 100, 100, nil), 0), sgl(wav(24000, 1, 100, 100, nil), 100), usage(3, 1)}, Success, "", 2},
		{"audio only", []string{vllm(wav(24000, 1, 100, 100, nil)), usage(3, 0)}, Success, "", 1},
		{"not base64", []string{text, `{"choices":[{"delta":{"audio":{"data":"!!"}}}]}`, usage(3, 1)}, InvalidOutput, "not base64", 0},
		{"not WAV", []string{text, `{"choices":[{"delta":{"audio":{"data":"AAAA"}}}]}`, usage(3, 1)}, InvalidOutput, "not a WAV", 0},
		{"no data", []string{text, `{"choices":[{"delta":{"audio":{"id":"a"}}}]}`, usage(3, 1)}, InvalidOutput, "without audio data", 0},
		{"dropped", []string{text, sgl(wav(24000, 1, 100, 100, nil), 0), sgl(wav(24000, 1, 100, 100, nil), 104), usage(3, 1)}, InvalidOutput, "4 dropped", 2},
		{"cut", []string{text, vllm(wav(24000, 1, 90, 100, nil)), usage(3, 1)}, InvalidOutput, "header_length", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(raw(tc.payloads...))
			defer srv.Close()
			clock, _ := NewClock()
			s := testSenders(t, srv.URL, clock)["h1"]
			s.minAudioSamples = 1
			o := s.send(context.Background(), []byte(`{}`), expect{output: 4})
			if o.class != tc.class || !strings.Contains(o.reason, tc.reason) {
				t.Fatalf("class %s (%s), want %s (%s)", o.class, o.reason, tc.class, tc.reason)
			}
			n := 0
			if o.audio != nil {
				n = len(o.audio.rec.Chunks)
			}
			if n != tc.chunks {
				t.Fatalf("%d audio chunks recorded, want %d", n, tc.chunks)
			}
			if tc.class == Success {
				a := o.audio.finish(o.end-1e9, o.end)
				if a.FirstAudioNS == 0 || a.FirstAudioNS != a.Chunks[len(a.Chunks)-tc.chunks+boolInt(tc.name == "vllm-omni")].AtNS {
					t.Fatalf("first audio %d, chunks %+v", a.FirstAudioNS, a.Chunks)
				}
				if a.RTF != 1/a.DurationS || a.XRT != a.DurationS {
					t.Fatalf("rtf %v x_rt %v over a 1 s JCT and %v s of audio", a.RTF, a.XRT, a.DurationS)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestGapStats: quantiles, max and CV of gaps.
func TestGapStats(t *testing.T) {
	g := gapStats([]int64{2e6, 1e6, 3e6, 2e6})
	// mean 2 ms, population stddev sqrt(0.5) ms
	if g.N != 4 || g.P50 != 2 || g.Max != 3 || g.CV != math.Sqrt(2e12/4)/2e6 {
		t.Fatalf("%+v", g)
	}
	if g := gapStats([]int64{5e6}); g.CV != 0 || g.Max != 5 {
		t.Fatalf("one gap: %+v", g)
	}
	if g := gapStats(nil); g != (GapStats{}) {
		t.Fatalf("no gap: %+v", g)
	}
}

// TestRunRefusesAudioConfig: modalities on completions, and a negative
// playable minimum, are refused before anything is sent.
func TestRunRefusesAudioConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Endpoint: Completions, Modalities: []string{"audio"}},
		{Endpoint: Completions, MinAudioSamples: -1},
	} {
		cfg.BaseURL, cfg.Model, cfg.LoadPoint, cfg.MaxConcurrency = "http://127.0.0.1:1", "m", "saturation", 1
		cfg.CleanSegment, cfg.NumClean, cfg.ResultDir = 100*time.Millisecond, 1, t.TempDir()
		if _, err := Run(context.Background(), cfg, smallManifest(t, 2)); err == nil ||
			!strings.Contains(err.Error(), "modalities") && !strings.Contains(err.Error(), "min audio samples") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}
