package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/spf13/pflag"
)

// Streamed audio, in the real servers' chat stream format
// (docs/servers.md, "Streamed audio"), for a chat request whose
// "modalities" include "audio" on --server-kind vllm-omni or sglang-omni:
// the text tokens first (as the thinker answers before the talker
// speaks), then --audio-chunks audio chunks, each a base64 WAV file of
// 16-bit mono PCM:
//
//   - vllm-omni: every chunk has a top-level "modality" ("text" or
//     "audio"); an audio chunk's delta is the role and "content" = the
//     WAV, with finish_reason "stop" and a usage of zero completion
//     tokens; the usage chunk (stream_options.include_usage) comes last.
//   - sglang-omni: an audio chunk's delta is "audio": {"id", "data"};
//     the finish chunk (empty delta, finish reason, usage) comes last.
//
// The switches break the stream the ways the waveform check must catch,
// at the boundary before chunk --audio-fault-chunk. The samples are a
// sine whose phase follows the waveform's sample position, so a dropped
// or repeated stretch is a real discontinuity.
type audioConfig struct {
	chunks, samplesPerChunk, sampleRate int
	offsets                             bool
	faultChunk                          int
	drop, dup, truncate, rateChange     int
	headerOnlyFirst                     bool
	stallS                              float64
	// emptyDelta: an empty audio delta (no data at all) before the fault
	// chunk, as vLLM-Omni sends for a talker segment without waveform.
	emptyDelta bool
	// fullDiffer: samples of a non-streamed answer's waveform changed.
	fullDiffer int
}

func addAudioFlags(f *pflag.FlagSet, a *audioConfig) {
	f.IntVar(&a.chunks, "audio-chunks", 4, "audio chunks of a chat stream asked for the audio modality (vllm-omni, sglang-omni)")
	f.IntVar(&a.samplesPerChunk, "audio-samples-per-chunk", 2400, "samples of each audio chunk")
	f.IntVar(&a.sampleRate, "audio-sample-rate", 24000, "the audio's sample rate (both servers' default, 24000 Hz)")
	f.BoolVar(&a.offsets, "audio-offsets", false, "every audio chunk carries audio_offset, its first sample's position in the waveform (no real server sends it)")
	f.IntVar(&a.faultChunk, "audio-fault-chunk", 1, "the audio chunk before which the audio faults below happen")
	f.IntVar(&a.drop, "audio-drop-samples", 0, "misbehave: skip this many samples of the waveform at the fault boundary (the headers stay consistent)")
	f.IntVar(&a.dup, "audio-dup-samples", 0, "misbehave: send the last this many samples of the previous chunk again at the fault boundary")
	f.IntVar(&a.truncate, "audio-truncate-samples", 0, "misbehave: the fault chunk's data is this many samples shorter than its WAV header declares")
	f.IntVar(&a.rateChange, "audio-rate-change", 0, "misbehave: the fault chunk and those after it declare this sample rate (0: no change)")
	f.BoolVar(&a.headerOnlyFirst, "audio-header-only-first", false, "misbehave: the first audio chunk is a WAV header with no samples")
	f.Float64Var(&a.stallS, "audio-stall-s", 0, "misbehave: seconds of silence before the fault chunk is sent")
	f.IntVar(&a.fullDiffer, "audio-full-differ-samples", 0, "misbehave: a non-streamed chat answer's audio differs from the stream's in this many samples")
	f.BoolVar(&a.emptyDelta, "audio-empty-delta", false, "an empty audio delta (vllm-omni: modality audio, content \"\"; sglang-omni: audio data \"\") before the fault chunk, as vLLM-Omni sends for an empty speech segment")
}

func (a audioConfig) validate() error {
	if a.chunks < 1 || a.samplesPerChunk < 1 || a.sampleRate < 1 || a.faultChunk < 1 || a.faultChunk >= a.chunks {
		return fmt.Errorf("--audio-chunks, --audio-samples-per-chunk and --audio-sample-rate must be positive, --audio-fault-chunk between 1 and --audio-chunks - 1")
	}
	if a.drop < 0 || a.dup < 0 || a.dup > a.samplesPerChunk || a.truncate < 0 || a.truncate > a.samplesPerChunk ||
		a.rateChange < 0 || a.stallS < 0 || math.IsNaN(a.stallS) {
		return fmt.Errorf("the --audio-* faults must not be negative; --audio-dup-samples and --audio-truncate-samples at most --audio-samples-per-chunk")
	}
	return nil
}

// audioPiece is one audio chunk to send: the WAV and where its first
// sample sits in the waveform.
type audioPiece struct {
	wav    []byte
	offset int64
}

// pieces renders the audio chunks of one response.
func (a audioConfig) pieces() []audioPiece {
	var out []audioPiece
	if a.headerOnlyFirst {
		out = append(out, audioPiece{wav: wavFile(nil, a.sampleRate, 0)})
	}
	pos, prev := int64(0), []int16(nil)
	rate := a.sampleRate
	for i := 0; i < a.chunks; i++ {
		samples := sine(pos, a.samplesPerChunk, a.sampleRate)
		declared := len(samples)
		if i == a.faultChunk {
			if a.rateChange > 0 {
				rate = a.rateChange
			}
			switch {
			case a.drop > 0:
				pos += int64(a.drop)
				samples = sine(pos, a.samplesPerChunk, a.sampleRate)
			case a.dup > 0:
				pos -= int64(a.dup)
				samples = append(slices.Clone(prev[len(prev)-a.dup:]), samples[:len(samples)-a.dup]...)
			}
			declared = len(samples)
			samples = samples[:len(samples)-a.truncate]
		}
		out = append(out, audioPiece{wav: wavFile(samples, rate, declared), offset: pos})
		pos += int64(declared)
		prev = samples
	}
	return out
}

// sine is n samples of a 440 Hz tone from waveform position pos.
func sine(pos int64, n, rate int) []int16 {
	s := make([]int16, n)
	for i := range s {
		s[i] = int16(8000 * math.Sin(2*math.Pi*440*float64(pos+int64(i))/float64(rate)))
	}
	return s
}

// wavFile is a 16-bit mono PCM WAV of samples whose header declares
// declared samples.
func wavFile(samples []int16, rate, declared int) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + 2*declared))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))        // PCM
	le(uint16(1))        // channels
	le(uint32(rate))     // sample rate
	le(uint32(rate * 2)) // byte rate
	le(uint16(2))        // block align
	le(uint16(16))       // bits per sample
	b.WriteString("data")
	le(uint32(2 * declared))
	le(samples)
	return b.Bytes()
}

// omniDelta is a chat delta of an Omni stream; a Content of "" is sent
// as such (vLLM-Omni's role chunk, its empty audio delta).
type omniDelta struct {
	Role    string     `json:"role,omitempty"`
	Content *string    `json:"content,omitempty"`
	Audio   *omniAudio `json:"audio,omitempty"`
}

func text(s string) *string { return &s }

type omniAudio struct {
	ID   string `json:"id"`
	Data string `json:"data"`
}

type omniChoice struct {
	Index        int        `json:"index"`
	Delta        *omniDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type omniChunk struct {
	response[omniChoice]
	// Modality is vLLM-Omni's; AudioOffset only with --audio-offsets.
	Modality    string `json:"modality,omitempty"`
	AudioOffset *int64 `json:"audio_offset,omitempty"`
}

// wantsAudio reports whether a chat request asks this kind for audio.
func (k kindConfig) wantsAudio(req chatRequest) bool {
	return (k.kind == kindVLLMOmni || k.kind == kindSGLangOmni) && slices.Contains(req.Modalities, "audio")
}

// chatAudioFull answers a chat request that is not streamed with the
// text and the whole waveform as one WAV in choices[0].message.audio
// {id, data} (vLLM-Omni's _create_audio_choice with stream False,
// SGLang-Omni's _chat_non_stream: docs/servers.md). The waveform is the
// one the stream's chunks cut up, without the stream's faults (a dropped
// or repeated boundary is the stream's, as SGLang-Omni's issue #1354 was);
// --audio-full-differ-samples changes this many of its samples, so that
// the two outputs disagree.
func (a *api) chatAudioFull(w http.ResponseWriter, gen generation, text string) {
	cfg := a.kind.audio
	samples := sine(0, cfg.chunks*cfg.samplesPerChunk, cfg.sampleRate)
	for i := 0; i < min(cfg.fullDiffer, len(samples)); i++ {
		samples[i] = -samples[i] + 1000
	}
	data := base64.StdEncoding.EncodeToString(wavFile(samples, cfg.sampleRate, len(samples)))
	reason := "stop"
	resp := map[string]any{"id": gen.id, "object": "chat.completion", "created": gen.created, "model": gen.model,
		"choices": []map[string]any{{"index": 0, "finish_reason": reason,
			"message": map[string]any{"role": "assistant", "content": text, "audio": map[string]any{"id": "audio-" + gen.id, "data": data}}}},
		"usage": gen.usage()}
	writeJSON(w, http.StatusOK, resp)
}

// chatAudioStream streams the text tokens, then the audio chunks, in the
// kind's format.
func (a *api) chatAudioStream(w http.ResponseWriter, r *http.Request, gen generation, includeUsage bool) {
	vllm := a.kind.kind == kindVLLMOmni
	modality := func(m string) string {
		if vllm {
			return m
		}
		return ""
	}
	chunk := func(m string, d *omniDelta, finish *string) omniChunk {
		return omniChunk{response: respond(gen, "chat.completion.chunk", []omniChoice{{Delta: d, FinishReason: finish}}), Modality: modality(m)}
	}
	send := a.sseStart(w)
	if send(chunk("text", &omniDelta{Role: "assistant"}, nil)) != nil {
		return
	}
	if err := a.generate(r.Context(), gen.max, func(i int) error {
		if err := a.midstreamError(i, send); err != nil {
			return err
		}
		return send(chunk("text", &omniDelta{Content: text(token(i))}, nil))
	}); err != nil {
		if errors.Is(err, errMidstream) {
			_ = send(nil)
		}
		return
	}
	if a.sendAudio(r, gen, send, chunk) != nil {
		return
	}
	stop := "stop"
	switch {
	case !vllm:
		// SGLang-Omni: the finish chunk, whatever stream_options says.
		last := chunk("", &omniDelta{}, &stop)
		last.Usage = a.kind.usage(gen)
		if send(last) != nil {
			return
		}
	case includeUsage && !a.kind.noUsage:
		last := omniChunk{response: respond(gen, "chat.completion.chunk", []omniChoice{})}
		last.Usage = gen.usage()
		if send(last) != nil {
			return
		}
	}
	_ = send(nil)
}

// sendAudio sends the audio chunks, one per token interval, with the
// stall before the fault chunk.
func (a *api) sendAudio(r *http.Request, gen generation, send func(any) error, chunk func(string, *omniDelta, *string) omniChunk) error {
	cfg := a.kind.audio
	pieces := cfg.pieces()
	fault := cfg.faultChunk
	if cfg.headerOnlyFirst {
		fault++
	}
	for i, p := range pieces {
		if i == fault && cfg.emptyDelta {
			if err := send(a.emptyAudioDelta(gen, chunk)); err != nil {
				return err
			}
		}
		wait := a.tokenInterval
		if i == fault && cfg.stallS > 0 {
			wait += seconds(cfg.stallS)
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return r.Context().Err()
			}
		}
		data := base64.StdEncoding.EncodeToString(p.wav)
		var c omniChunk
		if a.kind.kind == kindVLLMOmni {
			stop := "stop"
			c = chunk("audio", &omniDelta{Role: "assistant", Content: &data}, &stop)
			if !a.kind.noUsage {
				c.Usage = &usage{PromptTokens: gen.prompt, TotalTokens: gen.prompt}
			}
		} else {
			c = chunk("audio", &omniDelta{Audio: &omniAudio{ID: "audio-" + gen.id, Data: data}}, nil)
		}
		if cfg.offsets {
			off := p.offset
			c.AudioOffset = &off
		}
		if err := send(c); err != nil {
			return err
		}
	}
	return nil
}

// emptyAudioDelta is an audio chunk without data: vLLM-Omni's
// _create_audio_choice, when the talker's segment has no waveform, sends
// the role and content "" under modality audio (with the usage of 0
// completion tokens of every audio chunk); SGLang-Omni's shape carries
// audio data "".
func (a *api) emptyAudioDelta(gen generation, chunk func(string, *omniDelta, *string) omniChunk) omniChunk {
	if a.kind.kind == kindVLLMOmni {
		c := chunk("audio", &omniDelta{Role: "assistant", Content: text("")}, nil)
		if !a.kind.noUsage {
			c.Usage = &usage{PromptTokens: gen.prompt, TotalTokens: gen.prompt}
		}
		return c
	}
	return chunk("audio", &omniDelta{Audio: &omniAudio{ID: "audio-" + gen.id, Data: ""}}, nil)
}
