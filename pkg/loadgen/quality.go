package loadgen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"warden/pkg/atomicfile"
)

// The quality pass (seed 000 §4): "质量等价门先于性能排名" (the quality gate
// comes before the performance ranking), its evaluators scoring the
// outputs of a locked correctness set; and its waveform invariant
// "最终离线拼接与服务端完整输出在允许误差内一致" (the concatenated stream
// agrees with the server's complete output within the allowed error).
//
// After the drain (and the release check of a cancellation run), outside
// the measured interval and its records, the client sends each of the
// manifest's first QualityRows requests twice, with the run's seed: once
// streamed, keeping its text and its audio chunks' samples concatenated,
// once not streamed, keeping the complete output the server returns
// (choices[0].message: content, and audio.data, a base64 WAV, on both Omni
// servers: docs/servers.md). Both outputs go to QualityDir, a private
// directory outside the campaign (mode 0700, files 0600): generated text
// and audio never enter the run's public files, which hold only counts,
// sample figures and the files' SHA-256. Then the two waveforms are
// compared: their lengths in samples, and the RMS of their difference over
// the common length relative to the complete output's.

// Quality is the quality pass's options; QualityRows 0 is none.
type Quality struct {
	Rows int
	Dir  string
	// MaxLengthDiffSamples and MaxRelRMS are the comparison's tolerance.
	MaxLengthDiffSamples int64
	MaxRelRMS            float64
}

// DefaultMaxRelRMS is the default relative RMS difference allowed.
const DefaultMaxRelRMS = 0.01

// qualityTimeout bounds each request of the pass when the run has no
// drain bound; with one, each request has that bound (the pass runs
// after the drain, within the client's measuring deadline).
const qualityTimeout = 10 * time.Minute

// qualityBound is how long one request of the pass may take.
func (r *run) qualityBound() time.Duration {
	if r.cfg.DrainTimeout > 0 {
		return r.cfg.DrainTimeout
	}
	return qualityTimeout
}

// QualityRequest is one request of the pass, as result.json records it.
type QualityRequest struct {
	Row         int   `json:"row"`
	StreamClass Class `json:"stream_class"`
	FullStatus  int   `json:"full_status"`
	// StreamSamples and FullSamples are the samples of the concatenated
	// stream and of the complete output (-1: none).
	StreamSamples int64 `json:"stream_samples"`
	FullSamples   int64 `json:"full_samples"`
	// LengthDiffSamples is stream - full; RelRMS the difference's RMS
	// over the common length, relative to the complete output's RMS.
	LengthDiffSamples int64    `json:"length_diff_samples"`
	RelRMS            *float64 `json:"rel_rms"`
	// Compared: both waveforms were there to compare; Match: within the
	// tolerance.
	Compared bool   `json:"compared"`
	Match    bool   `json:"match"`
	Why      string `json:"why,omitempty"`
	// Files are the kept files' names in the private directory and their
	// SHA-256 (the evaluators' inputs, verifiable without their content).
	Files map[string]string `json:"files"`
}

// QualitySummary is result.json's "quality" block.
type QualitySummary struct {
	Rows                 int              `json:"rows"`
	MaxLengthDiffSamples int64            `json:"max_length_diff_samples"`
	MaxRelRMS            float64          `json:"max_rel_rms"`
	Kept                 int              `json:"kept"`
	Compared             int              `json:"compared"`
	Mismatched           int              `json:"mismatched"`
	Requests             []QualityRequest `json:"requests"`
}

// CheckQualityDir refuses a private directory inside the campaign
// directory (campaignDir, "" when not under a controller): its outputs
// would be the campaign's public files.
func CheckQualityDir(dir, campaignDir string) error {
	if dir == "" {
		return errors.New("the quality pass needs a private directory for the outputs")
	}
	if campaignDir == "" {
		return nil
	}
	a, err1 := filepath.Abs(dir)
	c, err2 := filepath.Abs(campaignDir)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("quality directory %s: %v %v", dir, err1, err2)
	}
	if rel, err := filepath.Rel(c, a); err == nil && filepath.IsLocal(rel) || a == c {
		return fmt.Errorf("quality directory %s is inside the campaign directory %s: generated text and audio must stay out of the campaign's files", dir, campaignDir)
	}
	return nil
}

// capture keeps a streamed request's text and audio samples.
type capture struct {
	text   strings.Builder
	pcm    []byte
	format AudioFormat
	why    string
}

// add takes one stream chunk's payload.
func (c *capture) add(payload []byte, ch chunk) {
	var p struct {
		Modality string `json:"modality"`
		Choices  []struct {
			Text  *string `json:"text"`
			Delta *struct {
				Content *string `json:"content"`
				Audio   *struct {
					Data *string `json:"data"`
				} `json:"audio"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return
	}
	for _, x := range p.Choices {
		switch {
		case x.Text != nil:
			c.text.WriteString(*x.Text)
		case x.Delta == nil:
		case ch.audio && x.Delta.Audio != nil && x.Delta.Audio.Data != nil:
			c.addWAV(*x.Delta.Audio.Data)
		case ch.audio && p.Modality == "audio" && x.Delta.Content != nil:
			c.addWAV(*x.Delta.Content)
		case x.Delta.Content != nil:
			c.text.WriteString(*x.Delta.Content)
		}
	}
}

// addWAV appends a base64 WAV chunk's samples ("" is an empty delta).
func (c *capture) addWAV(b64 string) {
	if b64 == "" || c.why != "" {
		return
	}
	data, f, why := wavData(b64)
	switch {
	case why != "":
		c.why = why
	case len(c.pcm) == 0 && c.format == (AudioFormat{}):
		c.format = f
	case f != c.format:
		c.why = "the stream's chunks change format"
		return
	}
	c.pcm = append(c.pcm, data...)
}

// wavData decodes a base64 WAV into its sample bytes and format.
func wavData(b64 string) ([]byte, AudioFormat, string) {
	wav, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, AudioFormat{}, "audio data is not base64"
	}
	ac, why := readWAV(wav)
	if why != "" {
		return nil, AudioFormat{}, why
	}
	at := dataOffset(wav)
	frame := int64(ac.Channels * ac.BitsPerSample / 8)
	end := min(len(wav), at+int(ac.Samples*frame))
	return wav[at:end], ac.format(), ""
}

// dataOffset is where the samples of a WAV file readWAV accepted begin:
// after the "data" chunk's header, walking the chunks as readWAV does.
func dataOffset(b []byte) int {
	for i := 12; i+8 <= len(b); {
		size := int(binary.LittleEndian.Uint32(b[i+4 : i+8]))
		if string(b[i:i+4]) == "data" {
			return i + 8
		}
		i += 8 + size + size&1
	}
	return len(b)
}

// wavBytes is a 16-bit-or-other PCM WAV file of data in format f.
func wavBytes(data []byte, f AudioFormat) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	block := f.Channels * f.BitsPerSample / 8
	b.WriteString("RIFF")
	le(uint32(36 + len(data)))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(f.Channels))
	le(uint32(f.SampleRate))
	le(uint32(f.SampleRate * block))
	le(uint16(block))
	le(uint16(f.BitsPerSample))
	b.WriteString("data")
	le(uint32(len(data)))
	b.Write(data)
	return b.Bytes()
}

// compareWaveforms compares the concatenated stream a with the complete
// output b, both 16-bit PCM of one format: the length difference in
// frames and the relative RMS difference over the common length.
func compareWaveforms(a, b []byte, f AudioFormat) (lengthDiff int64, relRMS float64, why string) {
	if f.BitsPerSample != 16 {
		return 0, 0, "only 16-bit PCM is compared"
	}
	frame := int64(f.Channels * 2)
	na, nb := int64(len(a))/frame, int64(len(b))/frame
	lengthDiff = na - nb
	n := min(len(a), len(b)) / 2
	var diff, ref float64
	for i := 0; i < n; i++ {
		x := float64(int16(binary.LittleEndian.Uint16(a[2*i:])))
		y := float64(int16(binary.LittleEndian.Uint16(b[2*i:])))
		diff += (x - y) * (x - y)
		ref += y * y
	}
	switch {
	case n == 0:
		return lengthDiff, 0, "no common samples to compare"
	case ref == 0:
		return lengthDiff, math.Sqrt(diff / float64(n)), ""
	}
	return lengthDiff, math.Sqrt(diff / ref), ""
}

// qualityPass runs the pass after the drain and adds its block.
func (r *run) qualityPass(ctx context.Context, res *Result) {
	q := r.cfg.Quality
	if q.Rows <= 0 || r.m == nil {
		return
	}
	sum := &QualitySummary{Rows: q.Rows, MaxLengthDiffSamples: q.MaxLengthDiffSamples, MaxRelRMS: q.MaxRelRMS, Requests: []QualityRequest{}}
	res.Quality = sum
	if err := os.MkdirAll(q.Dir, 0o700); err != nil {
		sum.Requests = append(sum.Requests, QualityRequest{Row: -1, Why: "the private directory cannot be made"})
		return
	}
	for i := 0; i < min(q.Rows, r.m.Len()) && ctx.Err() == nil; i++ {
		sum.Requests = append(sum.Requests, r.qualityRequest(ctx, i))
		qr := &sum.Requests[len(sum.Requests)-1]
		if len(qr.Files) > 0 {
			sum.Kept++
		}
		if qr.Compared {
			sum.Compared++
			if !qr.Match {
				sum.Mismatched++
			}
		}
	}
}

// qualityRequest sends row i streamed and not, keeps both outputs and
// compares them.
func (r *run) qualityRequest(ctx context.Context, i int) QualityRequest {
	qr := QualityRequest{Row: i, StreamSamples: -1, FullSamples: -1, Files: map[string]string{}}
	prompt, err := r.m.prompt(i)
	if err != nil {
		qr.Why = "the manifest row cannot be read"
		return qr
	}
	body := r.builder.build(prompt, r.m.OutputTokens(i))
	seed := []byte(`,"seed":` + strconv.FormatUint(r.cfg.Seed, 10) + `}`)
	body = append(body[:len(body)-1], seed...)
	sctx, cancel := context.WithTimeout(ctx, r.qualityBound())
	defer cancel()

	s := *r.sender
	s.stress, s.itl, s.conns, s.capture = nil, func(int64, int64) {}, nil, true
	o := s.send(sctx, body, expect{output: r.m.OutputTokens(i), exact: r.cfg.IgnoreEOS})
	qr.StreamClass = o.class
	full := bytes.Replace(body, []byte(`,"stream":true,"stream_options":{"include_usage":true}`), []byte(`,"stream":false`), 1)
	text, fullPCM, fullFormat, status, why := r.sendFull(ctx, full)
	qr.FullStatus = status

	name := fmt.Sprintf("%06d", i)
	keep := func(suffix string, data []byte) {
		if len(data) == 0 {
			return
		}
		p := filepath.Join(r.cfg.Quality.Dir, name+suffix)
		if err := atomicfile.WriteFile(p, data, 0o600); err == nil {
			h := sha256.Sum256(data)
			qr.Files[name+suffix] = hex.EncodeToString(h[:])
		}
	}
	c := o.capture
	if c != nil {
		doc, _ := json.Marshal(map[string]any{"id": r.m.ID(i), "row": i, "stream_text": c.text.String(), "full_text": text})
		keep(".json", doc)
		if len(c.pcm) > 0 {
			keep(".stream.wav", wavBytes(c.pcm, c.format))
			qr.StreamSamples = int64(len(c.pcm) / max(1, c.format.Channels*c.format.BitsPerSample/8))
		}
	}
	if len(fullPCM) > 0 {
		keep(".full.wav", wavBytes(fullPCM, fullFormat))
		qr.FullSamples = int64(len(fullPCM) / max(1, fullFormat.Channels*fullFormat.BitsPerSample/8))
	}
	switch {
	case o.class != Success:
		qr.Why = "the streamed request ended " + string(o.class)
	case why != "":
		qr.Why = "the complete output: " + why
	case c == nil:
		qr.Why = "the stream was not kept"
	case c.why != "":
		qr.Why = "the stream's audio: " + c.why
	case len(c.pcm) == 0 || len(fullPCM) == 0:
		qr.Why = "no audio in the stream or in the complete output"
	case c.format != fullFormat:
		qr.Why = fmt.Sprintf("the stream's format %s is not the complete output's %s", c.format, fullFormat)
	default:
		d, rel, w := compareWaveforms(c.pcm, fullPCM, fullFormat)
		qr.LengthDiffSamples, qr.Why = d, w
		if w == "" {
			qr.Compared, qr.RelRMS = true, &rel
			qr.Match = abs64(d) <= r.cfg.Quality.MaxLengthDiffSamples && rel <= r.cfg.Quality.MaxRelRMS
		}
	}
	return qr
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// sendFull posts a request that is not streamed and reads its complete
// output: choices[0].message's content and audio.data.
func (r *run) sendFull(ctx context.Context, body []byte) (text string, pcm []byte, f AudioFormat, status int, why string) {
	ctx, cancel := context.WithTimeout(ctx, r.qualityBound())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.sender.url, bytes.NewReader(body))
	if err != nil {
		return "", nil, f, 0, "build request"
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.sender.client.Do(req)
	if err != nil {
		return "", nil, f, 0, "no response: " + errKind(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return "", nil, f, resp.StatusCode, "the response was cut: " + errKind(err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, f, resp.StatusCode, "status " + strconv.Itoa(resp.StatusCode)
	}
	var doc struct {
		Choices []struct {
			Text    *string `json:"text"`
			Message *struct {
				Content *string `json:"content"`
				Audio   *struct {
					Data *string `json:"data"`
				} `json:"audio"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &doc) != nil || len(doc.Choices) == 0 {
		return "", nil, f, resp.StatusCode, "not a completion response"
	}
	ch := doc.Choices[0]
	switch {
	case ch.Text != nil:
		text = *ch.Text
	case ch.Message != nil && ch.Message.Content != nil:
		text = *ch.Message.Content
	}
	if ch.Message != nil && ch.Message.Audio != nil && ch.Message.Audio.Data != nil && *ch.Message.Audio.Data != "" {
		pcm, f, why = wavData(*ch.Message.Audio.Data)
	}
	return text, pcm, f, resp.StatusCode, why
}
