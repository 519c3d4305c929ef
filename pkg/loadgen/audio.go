package loadgen

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Streamed audio, as vLLM-Omni and SGLang-Omni send it in a chat stream
// asked for the audio modality (docs/servers.md, "Streamed audio"):
//
//   - vLLM-Omni: a chunk whose top-level "modality" is "audio" carries
//     the audio in its choice's delta "content": base64 of a WAV file.
//   - SGLang-Omni: a chunk whose choice's delta has an "audio" object
//     carries it in that object's "data": base64 of a WAV file.
//
// Each audio chunk is a WAV file of its own: a RIFF header declaring the
// format (sample rate, channels, bits per sample) and the data length,
// then 16-bit PCM samples. Where a stream carries "audio_offset" (the
// samples before the chunk, per channel), it is recorded too: neither
// real server sends it; a stream that does lets the waveform check see a
// gap or an overlap between chunks.
//
// None of this runs for a text stream: send calls it only for a chunk the
// chunk reader saw carrying audio.

// DefaultMinAudioSamples is the samples (per channel) a chunk must carry
// to be the first playable one (TTFA): the methodology's minimum of real
// samples, excluding a header-only or zero-length first chunk.
const DefaultMinAudioSamples = 1

// AudioChunk is one audio chunk of a request, as received.
type AudioChunk struct {
	// AtNS is when the client read it (CLOCK_MONOTONIC ns).
	AtNS int64 `json:"at_mono_ns"`
	// Bytes is the decoded WAV file's length.
	Bytes int `json:"bytes"`
	// Samples is the PCM samples present, per channel (the data bytes
	// present divided by channels x bytes per sample).
	Samples int64 `json:"samples"`
	// HeaderSamples is what the WAV header's data length declares, per
	// channel; it differs from Samples when the data was cut or padded.
	HeaderSamples int64 `json:"header_samples"`
	SampleRate    int   `json:"sample_rate"`
	Channels      int   `json:"channels"`
	BitsPerSample int   `json:"bits_per_sample"`
	// Offset is the stream's "audio_offset" for the chunk; absent when
	// the stream carries none.
	Offset *int64 `json:"offset,omitempty"`
	// Empty: the chunk's audio data was empty, no WAV at all (vLLM-Omni
	// sends an empty audio delta for an empty speech segment, so that
	// its stream ends normally). It carries no samples and no format, is
	// never playable, and the waveform rules pass over it.
	Empty bool `json:"empty,omitempty"`
}

// AudioFormat is the sample format a server declares for its streamed
// audio: every chunk must be of it.
type AudioFormat struct {
	SampleRate    int `json:"sample_rate"`
	Channels      int `json:"channels"`
	BitsPerSample int `json:"bits_per_sample"`
}

// DefaultAudioFormat is what both Omni servers declare unless a model's
// talker says otherwise (docs/servers.md, "Streamed audio"): 24 kHz, mono,
// 16-bit PCM. vLLM-Omni's _create_audio_choice takes 24000 Hz where the
// talker reports no rate and flattens the waveform to one channel;
// soundfile writes WAV as 16-bit PCM by default. SGLang-Omni's
// audio.DEFAULT_SAMPLE_RATE is 24000 and encode_wav writes mono 16-bit.
var DefaultAudioFormat = AudioFormat{SampleRate: 24000, Channels: 1, BitsPerSample: 16}

func (f AudioFormat) String() string {
	return fmt.Sprintf("%d Hz x %d ch x %d bit", f.SampleRate, f.Channels, f.BitsPerSample)
}

func (c AudioChunk) format() AudioFormat {
	return AudioFormat{SampleRate: c.SampleRate, Channels: c.Channels, BitsPerSample: c.BitsPerSample}
}

// AudioRecord is a request's audio: its chunks and the figures derived
// from them. Times are CLOCK_MONOTONIC ns; durations in ms.
type AudioRecord struct {
	Chunks []AudioChunk `json:"chunks"`
	// MinSamples is the playable minimum used for FirstAudioNS.
	MinSamples int64 `json:"min_samples"`
	// FirstAudioNS is the first chunk with at least MinSamples samples;
	// 0 if none.
	FirstAudioNS int64 `json:"first_audio_mono_ns"`
	// Samples is the sum of the chunks' samples; DurationS the sum of
	// each chunk's samples over its own sample rate (D_audio).
	Samples   int64   `json:"samples"`
	DurationS float64 `json:"duration_s"`
	// TTFAMS = first audio - sent; JCTMS = end - sent; RTF = (end -
	// sent) / 1e9 / D_audio; XRT = D_audio / ((end - sent) / 1e9); each
	// 0 when undefined.
	TTFAMS float64 `json:"ttfa_ms"`
	JCTMS  float64 `json:"jct_ms"`
	RTF    float64 `json:"rtf"`
	XRT    float64 `json:"x_rt"`
	// Gaps are between consecutive playable chunks (at least MinSamples).
	Gaps GapStats `json:"gaps"`
	// Violations are the waveform invariants the chunks break
	// (WaveformViolations); any makes the request invalid-output.
	Violations []string `json:"violations,omitempty"`
}

// GapStats summarizes chunk gaps in ms; CV is stddev / mean (population
// stddev; 0 with fewer than two gaps or a zero mean).
type GapStats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	CV  float64 `json:"cv"`
}

// audioChunkJSON is the part of a stream chunk that carries audio.
type audioChunkJSON struct {
	Modality    string `json:"modality"`
	AudioOffset *int64 `json:"audio_offset"`
	Choices     []struct {
		Delta *struct {
			Content *string `json:"content"`
			Audio   *struct {
				Data *string `json:"data"`
			} `json:"audio"`
		} `json:"delta"`
	} `json:"choices"`
}

// readAudio decodes the audio of one chunk payload the chunk reader saw
// carrying audio. why is "" when it decoded.
func readAudio(payload []byte, at int64) (AudioChunk, string) {
	var c audioChunkJSON
	if err := json.Unmarshal(payload, &c); err != nil {
		return AudioChunk{}, "an audio chunk is not JSON of the audio chunk's types"
	}
	var data *string
	for _, ch := range c.Choices {
		switch {
		case ch.Delta == nil:
		case ch.Delta.Audio != nil && ch.Delta.Audio.Data != nil:
			data = ch.Delta.Audio.Data
		case c.Modality == "audio" && ch.Delta.Content != nil:
			data = ch.Delta.Content
		}
	}
	if data == nil {
		return AudioChunk{}, "an audio chunk without audio data"
	}
	if *data == "" {
		return AudioChunk{AtNS: at, Offset: c.AudioOffset, Empty: true}, ""
	}
	wav, err := base64.StdEncoding.DecodeString(*data)
	if err != nil {
		return AudioChunk{}, "an audio chunk's data is not base64"
	}
	ac, why := readWAV(wav)
	ac.AtNS, ac.Offset = at, c.AudioOffset
	return ac, why
}

// readWAV reads a WAV file's format and data length: RIFF/WAVE, a "fmt "
// chunk of PCM (format 1) before a "data" chunk; other chunks skipped.
func readWAV(b []byte) (AudioChunk, string) {
	ac := AudioChunk{Bytes: len(b)}
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return ac, "an audio chunk is not a WAV file"
	}
	fmtSeen := false
	for i := 12; i+8 <= len(b); {
		id, size := string(b[i:i+4]), int64(binary.LittleEndian.Uint32(b[i+4:i+8]))
		body := i + 8
		switch id {
		case "fmt ":
			if size < 16 || body+16 > len(b) {
				return ac, "an audio chunk's WAV format is cut short"
			}
			if binary.LittleEndian.Uint16(b[body:]) != 1 {
				return ac, "an audio chunk's WAV is not PCM"
			}
			ac.Channels = int(binary.LittleEndian.Uint16(b[body+2:]))
			ac.SampleRate = int(binary.LittleEndian.Uint32(b[body+4:]))
			ac.BitsPerSample = int(binary.LittleEndian.Uint16(b[body+14:]))
			if ac.Channels < 1 || ac.SampleRate < 1 || ac.BitsPerSample < 8 || ac.BitsPerSample%8 != 0 {
				return ac, "an audio chunk's WAV format is not a sound one"
			}
			fmtSeen = true
		case "data":
			if !fmtSeen {
				return ac, "an audio chunk's WAV data comes before its format"
			}
			frame := int64(ac.Channels * ac.BitsPerSample / 8)
			present := int64(len(b) - body)
			if end := body + int(size); present > size && size&1 == 0 && trailingChunks(b, end) {
				present = size // the data chunk is followed by whole chunks of other kinds
			}
			ac.HeaderSamples = size / frame
			ac.Samples = present / frame
			return ac, ""
		}
		i = body + int(size) + int(size&1)
		if size > int64(len(b)) {
			break
		}
	}
	return ac, "an audio chunk's WAV has no data"
}

// trailingChunks reports whether b from i on is whole RIFF chunks, each
// an id and a length that ends inside b, ending exactly at b's end.
func trailingChunks(b []byte, i int) bool {
	for i < len(b) {
		if i+8 > len(b) {
			return false
		}
		size := int(binary.LittleEndian.Uint32(b[i+4 : i+8]))
		if size < 0 || size > len(b)-i-8 {
			return false
		}
		i += 8 + size + size&1
	}
	return i == len(b)
}

// addAudio records the audio of a chunk the chunk reader saw carrying
// some, at the current instant. why is "" when it decoded.
func (s *sender) addAudio(o *outcome, payload []byte) string {
	at := s.clock.Now()
	c, why := readAudio(payload, at)
	if why != "" {
		return why
	}
	if o.audio == nil {
		o.audio = &audioTrack{rec: AudioRecord{MinSamples: s.minAudioSamples}, declared: s.audioFormat}
	}
	o.audio.add(c)
	return ""
}

// audioTrack gathers one request's audio chunks while it streams.
type audioTrack struct {
	rec AudioRecord
	// declared is the format every chunk must be of (the zero value:
	// DefaultAudioFormat).
	declared AudioFormat
}

// carried reports whether the stream carried audio: a chunk that is not
// empty (nil carries none).
func (t *audioTrack) carried() bool {
	if t == nil {
		return false
	}
	for _, c := range t.rec.Chunks {
		if !c.Empty {
			return true
		}
	}
	return false
}

// violations are the waveform rules the chunks break, then the declared
// format's.
func (t *audioTrack) violations() []string {
	return append(WaveformViolations(t.rec.Chunks), DeclaredFormatViolations(t.rec.Chunks, t.declared)...)
}

// DeclaredFormatViolations is the declared_format rule: every chunk that
// is not empty has the sample rate, channels and bits per sample the
// server declares (the zero value: DefaultAudioFormat). A server that
// sends another format than it declares, a 1 Hz WAV say, would make every
// duration-based figure (D_audio, RTF, x_RT) wrong by the ratio; it is
// reported once, with the first chunk that breaks it and their count.
func DeclaredFormatViolations(chunks []AudioChunk, declared AudioFormat) []string {
	if declared == (AudioFormat{}) {
		declared = DefaultAudioFormat
	}
	first, n := -1, 0
	for i, c := range chunks {
		if c.Empty || c.format() == declared {
			continue
		}
		if first < 0 {
			first = i
		}
		n++
	}
	if n == 0 {
		return nil
	}
	return []string{fmt.Sprintf("declared_format: %d chunk(s) of another format than the server declares, the first (chunk %d) %s, declared %s",
		n, first, chunks[first].format(), declared)}
}

// add records one chunk.
func (t *audioTrack) add(c AudioChunk) {
	t.rec.Chunks = append(t.rec.Chunks, c)
	if t.rec.FirstAudioNS == 0 && c.Samples >= t.rec.MinSamples {
		t.rec.FirstAudioNS = c.AtNS
	}
}

// finish derives the figures once the request ended: sent is t_in, end
// the terminal instant.
func (t *audioTrack) finish(sent, end int64) *AudioRecord {
	a := &t.rec
	var gaps []int64
	var last int64
	for _, c := range a.Chunks {
		a.Samples += c.Samples
		if c.SampleRate > 0 {
			a.DurationS += float64(c.Samples) / float64(c.SampleRate)
		}
		if c.Samples < a.MinSamples {
			continue
		}
		if last != 0 {
			gaps = append(gaps, c.AtNS-last)
		}
		last = c.AtNS
	}
	if a.FirstAudioNS > 0 {
		a.TTFAMS = ms(a.FirstAudioNS - sent)
	}
	a.JCTMS = ms(end - sent)
	jctS := float64(end-sent) / 1e9
	if a.DurationS > 0 {
		a.RTF = jctS / a.DurationS
	}
	if jctS > 0 {
		a.XRT = a.DurationS / jctS
	}
	a.Gaps = gapStats(gaps)
	a.Violations = t.violations()
	return a
}

// gapStats summarizes gaps (ns); it sorts them.
func gapStats(gaps []int64) GapStats {
	if len(gaps) == 0 {
		return GapStats{}
	}
	d := distNS(gaps)
	g := GapStats{N: d.N, P50: d.P50, P95: d.P95, P99: d.P99, Max: d.Max}
	var mean, ss float64
	for _, x := range gaps {
		mean += float64(x)
	}
	mean /= float64(len(gaps))
	for _, x := range gaps {
		ss += (float64(x) - mean) * (float64(x) - mean)
	}
	if len(gaps) > 1 && mean > 0 {
		g.CV = math.Sqrt(ss/float64(len(gaps))) / mean
	}
	return g
}

// WaveformViolations lists the waveform invariants a request's chunks
// break (docs/validators.md, "waveform"):
//
//   - header_length: a chunk's samples present equal what its WAV header
//     declares (a cut or padded chunk drops or adds samples);
//   - format_constant: sample rate, channels and bits per sample are the
//     first chunk's in every chunk;
//   - offsets: where the stream carries offsets, every chunk has one and
//     it equals the samples of the chunks before it (a larger one is
//     samples dropped at the boundary, a smaller one samples repeated);
//     the count goes on from the chunk's offset, so one fault is one
//     violation.
func WaveformViolations(chunks []AudioChunk) []string {
	var out []string
	var sum int64
	withOffset, first := 0, -1
	for i, c := range chunks {
		if c.Empty {
			continue
		}
		if first < 0 {
			first = i
		}
		if c.Offset != nil {
			withOffset++
		}
	}
	for i, c := range chunks {
		if c.Empty {
			continue // no samples, no format: nothing to keep
		}
		if c.Samples != c.HeaderSamples {
			out = append(out, fmt.Sprintf("header_length: chunk %d carries %d samples, its WAV header declares %d", i, c.Samples, c.HeaderSamples))
		}
		if f := chunks[first]; c.SampleRate != f.SampleRate || c.Channels != f.Channels || c.BitsPerSample != f.BitsPerSample {
			out = append(out, fmt.Sprintf("format_constant: chunk %d is %d Hz x %d ch x %d bit, chunk %d %d Hz x %d ch x %d bit",
				i, c.SampleRate, c.Channels, c.BitsPerSample, first, f.SampleRate, f.Channels, f.BitsPerSample))
		}
		switch {
		case withOffset == 0:
		case c.Offset == nil:
			out = append(out, fmt.Sprintf("offsets: chunk %d carries no offset, others do", i))
		case *c.Offset > sum:
			out = append(out, fmt.Sprintf("offsets: chunk %d starts at sample %d, %d samples came before it: %d dropped", i, *c.Offset, sum, *c.Offset-sum))
		case *c.Offset < sum:
			out = append(out, fmt.Sprintf("offsets: chunk %d starts at sample %d, %d samples came before it: %d repeated", i, *c.Offset, sum, sum-*c.Offset))
		}
		if c.Offset != nil {
			sum = *c.Offset // one fault is reported at its boundary only
		}
		sum += c.Samples
	}
	return out
}

// AudioSummary is result.json's audio block: the clean interval's
// successful requests that carried audio. TTFA, JCT and gaps in ms.
type AudioSummary struct {
	// Requests counts the successes with a playable chunk; NoPlayable
	// the successes without one (no audio, or none of MinSamples).
	Requests   int   `json:"requests"`
	NoPlayable int   `json:"no_playable"`
	MinSamples int64 `json:"min_samples"`
	TTFA       Dist  `json:"ttfa_ms"`
	JCT        Dist  `json:"jct_ms"`
	// RTF and XRT are unitless; their Dist fields hold the ratios.
	RTF  Dist `json:"rtf"`
	XRT  Dist `json:"x_rt"`
	Gaps Dist `json:"gaps_ms"`
	// GapCV is stddev / mean of every gap of the run; RequestGapCV the
	// distribution of the per-request CVs.
	GapCV        float64 `json:"gap_cv"`
	RequestGapCV Dist    `json:"request_gap_cv"`
	// DurationS is the summed D_audio.
	DurationS float64 `json:"duration_s"`
}

// audioSummary summarizes the audio records of recs (the clean
// successes).
func audioSummary(recs []*Record, minSamples int64) *AudioSummary {
	s := &AudioSummary{MinSamples: minSamples}
	var ttfa, jct, gaps []int64
	var rtf, xrt, cv []float64
	for _, r := range recs {
		a := r.Audio
		if a == nil || a.FirstAudioNS == 0 {
			s.NoPlayable++
			continue
		}
		s.Requests++
		s.DurationS += a.DurationS
		ttfa = append(ttfa, a.FirstAudioNS-r.SentNS)
		jct = append(jct, r.EndNS-r.SentNS)
		rtf, xrt, cv = append(rtf, a.RTF), append(xrt, a.XRT), append(cv, a.Gaps.CV)
		var last int64
		for _, c := range a.Chunks {
			if c.Samples < a.MinSamples {
				continue
			}
			if last != 0 {
				gaps = append(gaps, c.AtNS-last)
			}
			last = c.AtNS
		}
	}
	s.TTFA, s.JCT = distNS(ttfa), distNS(jct)
	s.RTF, s.XRT, s.RequestGapCV = distRatio(rtf), distRatio(xrt), distRatio(cv)
	s.GapCV = gapStats(append([]int64(nil), gaps...)).CV
	s.Gaps = distNS(gaps)
	return s
}

// distRatio is Dist over unitless values, nearest-rank as distNS.
func distRatio(v []float64) Dist {
	if len(v) == 0 {
		return Dist{}
	}
	sort.Float64s(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		if i < 0 {
			i = 0
		}
		return v[i]
	}
	return Dist{N: len(v), Mean: sum / float64(len(v)), P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), Max: v[len(v)-1]}
}

// configureAudio puts the audio options of the configuration into the
// request bodies and the sender.
func (r *run) configureAudio() error {
	if r.cfg.MinAudioSamples < 0 {
		return fmt.Errorf("min audio samples %d: want at least 0", r.cfg.MinAudioSamples)
	}
	if r.cfg.MinAudioSamples == 0 {
		r.cfg.MinAudioSamples = DefaultMinAudioSamples
	}
	r.sender.minAudioSamples = r.cfg.MinAudioSamples
	f := &r.cfg.AudioFormat
	if f.SampleRate < 0 || f.Channels < 0 || f.BitsPerSample < 0 || f.BitsPerSample%8 != 0 {
		return fmt.Errorf("audio format %s: want positive values, bits a multiple of 8 (0: the default %s)", *f, DefaultAudioFormat)
	}
	if f.SampleRate == 0 {
		f.SampleRate = DefaultAudioFormat.SampleRate
	}
	if f.Channels == 0 {
		f.Channels = DefaultAudioFormat.Channels
	}
	if f.BitsPerSample == 0 {
		f.BitsPerSample = DefaultAudioFormat.BitsPerSample
	}
	r.sender.audioFormat = *f
	if len(r.cfg.Modalities) == 0 {
		return nil
	}
	if r.cfg.Endpoint != Chat {
		return fmt.Errorf("modalities %v: only chat requests carry modalities", r.cfg.Modalities)
	}
	m, err := json.Marshal(r.cfg.Modalities)
	if err != nil {
		return err
	}
	r.builder.modalities = m
	return nil
}

// summarizeAudio adds the audio block of a run that asked for
// modalities: the clean interval's successes, as the text latencies.
func (r *run) summarizeAudio(res *Result, slots []*slot) {
	if len(r.cfg.Modalities) == 0 {
		return
	}
	res.Modalities = r.cfg.Modalities
	if slices.Contains(r.cfg.Modalities, "audio") {
		f := r.cfg.AudioFormat
		res.AudioFormat = &f
	}
	var recs []*Record
	for _, s := range slots {
		rec := &s.rec
		if s.done && rec.Class == Success && rec.EndNS >= r.cleanStart && rec.EndNS < r.cleanEnd {
			recs = append(recs, rec)
		}
	}
	res.Audio = audioSummary(recs, r.cfg.MinAudioSamples)
}
