package loadgen

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// The Omni servers' stream shapes, byte for byte as their source writes
// them (docs/servers.md, "Streamed audio" and "SGLang-Omni, usage"):
// pydantic's model_dump_json with the fields each sets.

// vllmOmni is a vLLM-Omni chat chunk (serving_chat.py at 00a3619b):
// OmniChatCompletionStreamResponse with its modality; an audio chunk also
// carries metrics (null unless asked for) and a usage of 0 completion
// tokens.
func vllmOmni(modality, delta, finish string) string {
	extra := ""
	if modality == "audio" {
		extra = `,"metrics":null,"usage":{"prompt_tokens":3,"total_tokens":3,"completion_tokens":0}`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"modality":%q%s}`,
		delta, finish, modality, extra)
}

// vllmOmniUsage is its include_usage chunk (exclude_none: no metrics).
func vllmOmniUsage(prompt, completion int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}`,
		prompt, prompt+completion, completion)
}

func vllmOmniAudio(w []byte, finish string) string {
	return vllmOmni("audio", fmt.Sprintf(`{"role":"assistant","content":%q}`, b64(w)), finish)
}

// vllmOmniEmptyAudio is the empty audio delta _create_audio_choice sends
// when the talker's segment has no waveform: role and "" content.
func vllmOmniEmptyAudio(finish string) string {
	return vllmOmni("audio", `{"role":"assistant","content":""}`, finish)
}

func vllmOmniText(text string) string {
	return vllmOmni("text", fmt.Sprintf(`{"content":%q}`, text), "null")
}

// TestVLLMOmniEmptyAudioDelta: an empty audio delta, in the middle of the
// audio or as its last chunk, is recorded as an empty chunk, never fails
// the request and is never its first audio; a stream whose only audio is
// empty carried none, and without a token it is invalid-output.
func TestVLLMOmniEmptyAudioDelta(t *testing.T) {
	role := vllmOmni("text", `{"role":"assistant","content":""}`, "null")
	w := wav(24000, 1, 2400, 2400, nil)
	for _, tc := range []struct {
		name     string
		payloads []string
		class    Class
		empty    []bool
	}{
		{"empty first", []string{role, vllmOmniText(" hi"), vllmOmniText(" there"), vllmOmniEmptyAudio("null"), vllmOmniAudio(w, "null"), vllmOmniAudio(w, `"stop"`), vllmOmniUsage(3, 2)},
			Success, []bool{true, false, false}},
		{"empty between", []string{role, vllmOmniText(" hi"), vllmOmniAudio(w, "null"), vllmOmniEmptyAudio("null"), vllmOmniAudio(w, `"stop"`), vllmOmniUsage(3, 1)},
			Success, []bool{false, true, false}},
		{"empty last", []string{role, vllmOmniText(" hi"), vllmOmniAudio(w, "null"), vllmOmniEmptyAudio(`"stop"`), vllmOmniUsage(3, 1)},
			Success, []bool{false, true}},
		{"only empty audio, no token", []string{role, vllmOmniEmptyAudio(`"stop"`), vllmOmniUsage(3, 0)},
			InvalidOutput, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(raw(tc.payloads...))
			defer srv.Close()
			clock, _ := NewClock()
			for name, s := range testSenders(t, srv.URL, clock) {
				s.kind, s.minAudioSamples = ServerVLLMOmni, 1
				o := s.send(context.Background(), []byte(`{}`), expect{output: 4, input: 3})
				if o.class != tc.class || (tc.class == InvalidOutput) != strings.Contains(o.reason, "no token chunk") {
					t.Fatalf("%s: %s %q, want %s", name, o.class, o.reason, tc.class)
				}
				if o.audio == nil || len(o.audio.rec.Chunks) != len(tc.empty) {
					t.Fatalf("%s: audio %+v, want %d chunks", name, o.audio, len(tc.empty))
				}
				a := o.audio.finish(o.end-1e9, o.end)
				firstFull := int64(0)
				for i, c := range a.Chunks {
					if c.Empty != tc.empty[i] || c.Empty && (c.Samples != 0 || c.SampleRate != 0 || c.AtNS == 0) {
						t.Fatalf("%s: chunk %d %+v, want empty %v", name, i, c, tc.empty[i])
					}
					if !c.Empty && firstFull == 0 {
						firstFull = c.AtNS
					}
				}
				if a.FirstAudioNS != firstFull || len(a.Violations) != 0 {
					t.Fatalf("%s: first audio %d, want the first chunk with samples (%d); violations %v", name, a.FirstAudioNS, firstFull, a.Violations)
				}
			}
		})
	}
}

// TestImpossibleAudioFormat: every audio chunk must be of the format the
// server declares (24 kHz, mono, 16-bit for both Omni servers, or what
// the protocol gives): a 1 Hz WAV of 100,000 samples, consistent in
// itself, is invalid-output with its figures; so is 24 kHz where the
// protocol declares 44.1 kHz, and stereo or 8-bit audio.
func TestImpossibleAudioFormat(t *testing.T) {
	pcm8 := wav(24000, 1, 100, 100, nil)
	pcm8[34] = 8 // bits per sample
	for _, tc := range []struct {
		name     string
		w        []byte
		declared AudioFormat
		reason   string
	}{
		{"24 kHz mono 16-bit", wav(24000, 1, 2400, 2400, nil), AudioFormat{}, ""},
		{"1 Hz", wav(1, 1, 100000, 100000, nil), AudioFormat{},
			"declared_format: 2 chunk(s) of another format than the server declares, the first (chunk 0) 1 Hz x 1 ch x 16 bit, declared 24000 Hz x 1 ch x 16 bit"},
		{"stereo", wav(24000, 2, 100, 100, nil), AudioFormat{}, "(chunk 0) 24000 Hz x 2 ch x 16 bit, declared 24000 Hz x 1 ch x 16 bit"},
		{"8-bit", pcm8, AudioFormat{}, "x 8 bit, declared 24000 Hz x 1 ch x 16 bit"},
		{"declared 44.1 kHz, sent 24 kHz", wav(24000, 1, 100, 100, nil), AudioFormat{SampleRate: 44100, Channels: 1, BitsPerSample: 16}, "declared 44100 Hz x 1 ch x 16 bit"},
		{"declared 44.1 kHz, sent 44.1 kHz", wav(44100, 1, 100, 100, nil), AudioFormat{SampleRate: 44100, Channels: 1, BitsPerSample: 16}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(raw(vllmOmniText(" hi"), vllmOmniAudio(tc.w, "null"), vllmOmniAudio(tc.w, `"stop"`), vllmOmniUsage(3, 1)))
			defer srv.Close()
			clock, _ := NewClock()
			s := testSenders(t, srv.URL, clock)["h1"]
			s.kind, s.minAudioSamples, s.audioFormat = ServerVLLMOmni, 1, tc.declared
			o := s.send(context.Background(), []byte(`{}`), expect{output: 4, input: 3})
			if tc.reason == "" {
				if o.class != Success {
					t.Fatalf("%s %q, want success", o.class, o.reason)
				}
				return
			}
			if o.class != InvalidOutput || !strings.Contains(o.reason, tc.reason) {
				t.Fatalf("%s %q, want invalid-output %q", o.class, o.reason, tc.reason)
			}
			if a := o.audio.finish(o.end-1e9, o.end); len(a.Violations) != 1 || !strings.Contains(a.Violations[0], tc.reason) {
				t.Fatalf("recorded violations %v", a.Violations)
			}
		})
	}
}

// sglangOmni is an SGLang-Omni chat chunk (openai_api.py _chat_stream at
// 022b6a3d): model_dump(exclude_none=True), finish_reason set to null on
// content chunks; the finish chunk's usage only where the pipeline gave
// one (final_usage), so without it the member is absent.
func sglangOmni(delta, finish, usage string) string {
	u := ""
	if usage != "" {
		u = `,"usage":` + usage
	}
	return fmt.Sprintf(`{"id":"chatcmpl-r","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]%s}`, delta, finish, u)
}

// TestSGLangOmniWithoutUsage: SGLang-Omni sends usage only when its
// pipeline's decode result carries it. Read as sglang-omni, a stream
// without usage is a success whose output tokens are the token chunks the
// client counted, marked as the client's, with no prompt count; with
// --ignore-eos the exact count cannot be checked and it is invalid-output;
// read as any other kind, a stream without usage is invalid-output. With
// the pipeline's usage the server's counts are taken.
func TestSGLangOmniWithoutUsage(t *testing.T) {
	chunks := []string{sglangOmni(`{"role":"assistant","content":"Hi"}`, "null", ""), sglangOmni(`{"content":" there"}`, "null", ""), sglangOmni(`{"content":"!"}`, "null", "")}
	noUsage := append(append([]string{}, chunks...), sglangOmni(`{}`, `"stop"`, ""))
	withUsage := append(append([]string{}, chunks...), sglangOmni(`{}`, `"stop"`, `{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}`))
	for _, tc := range []struct {
		name     string
		payloads []string
		kind     ServerKind
		e        expect
		class    Class
		reason   string
		source   string
		output   int
	}{
		{"no usage, sglang-omni", noUsage, ServerSGLangOmni, expect{output: 8, input: 3}, Success, "", UsageClient, 3},
		{"no usage, sglang-omni, exact", noUsage, ServerSGLangOmni, expect{output: 8, exact: true, input: 3}, InvalidOutput, "cannot be checked", "", 0},
		{"no usage, read as sglang", noUsage, ServerSGLang, expect{output: 8, input: 3}, InvalidOutput, "no usage in the stream", "", 0},
		{"no usage, read as auto", noUsage, ServerAuto, expect{output: 8, input: 3}, InvalidOutput, "no usage in the stream", "", 0},
		{"usage, sglang-omni", withUsage, ServerSGLangOmni, expect{output: 8, input: 3}, Success, "", "", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(raw(tc.payloads...))
			defer srv.Close()
			clock, _ := NewClock()
			for name, s := range testSenders(t, srv.URL, clock) {
				s.kind = tc.kind
				o := s.send(context.Background(), []byte(`{}`), tc.e)
				if o.class != tc.class || !strings.Contains(o.reason, tc.reason) || o.usageSource != tc.source || o.outputTokens != tc.output {
					t.Fatalf("%s: %s %q, source %q, %d output tokens; want %s %q, %q, %d", name, o.class, o.reason, o.usageSource, o.outputTokens, tc.class, tc.reason, tc.source, tc.output)
				}
			}
		})
	}
}
