package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"warden/pkg/loadgen"
)

// The waveform invariants of seed 000: "流式音频还要做波形级不变量：chunk
// 拼接后的总样本数与声明时长一致，边界处没有重复或丢样，通道数和采样率不变"
// (streamed audio needs waveform invariants: the concatenated chunks'
// total samples agree with the declared duration, no repeated or dropped
// samples at boundaries, channels and sample rate unchanged). It reads
// the audio records loadgen writes (requests/*.jsonl, "audio") and checks
// every request's chunks again by loadgen.WaveformViolations, whose rules
// WaveformRules names.

// WaveformRules are the rules of the waveform check, in the order of
// docs/validators.md's table: the three of loadgen.WaveformViolations,
// loadgen.DeclaredFormatViolations' against the format result.json says
// the server declares, then the two of the run.
var WaveformRules = []string{"header_length", "format_constant", "offsets", "declared_format", "chunks_present", "marked_invalid", "stream_matches_full"}

// waveformRequest is the part of a request record the check reads.
type waveformRequest struct {
	ID    string               `json:"id"`
	Class string               `json:"class"`
	Audio *loadgen.AudioRecord `json:"audio"`
}

// waveformResult is the part of result.json the check reads.
type waveformResult struct {
	Modalities  []string             `json:"modalities"`
	AudioFormat *loadgen.AudioFormat `json:"audio_format"`
	Files       struct {
		Requests []string `json:"requests"`
	} `json:"files"`
	// Quality is loadgen's quality pass, nil when the run had none.
	Quality *loadgen.QualitySummary `json:"quality"`
}

// WaveformDir checks the audio of the loadgen run in dir.
func WaveformDir(dir string) Result {
	f := newFindings()
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		f.errorf("result.json: %v", err)
		return f.result("")
	}
	var res waveformResult
	if err := json.Unmarshal(b, &res); err != nil {
		f.errorf("result.json: %v", err)
		return f.result("")
	}
	if !slices.Contains(res.Modalities, "audio") {
		f.errorf("result.json: the run asked for no audio (modalities %v): nothing to check", res.Modalities)
		return f.result("")
	}
	if len(res.Files.Requests) == 0 {
		f.errorf("result.json lists no request records")
		return f.result("")
	}
	reqs, err := readRecords[waveformRequest](dir, res.Files.Requests)
	if err != nil {
		f.errorf("request records: %v", err)
		return f.result("")
	}
	if res.AudioFormat == nil {
		f.errorf("declared_format: result.json names no declared audio format (audio_format): the chunks' format cannot be checked")
	}
	checkWaveforms(f, reqs, res.AudioFormat)
	checkStreamMatchesFull(f, res.Quality)
	return f.result(fmt.Sprintf("%d requests' audio chunks keep the waveform invariants", int(f.figs["audio_requests"])))
}

// checkWaveforms applies the rules to every successful or invalid-output
// request (the ones whose stream ended): the other classes ended before
// their audio did. declared is the format the server declares (nil: not
// known, the declared_format rule is not applied).
func checkWaveforms(f *findings, reqs []waveformRequest, declared *loadgen.AudioFormat) {
	var audio, chunks, violating, unmarked, missing int
	for _, q := range reqs {
		if q.Class != string(loadgen.Success) && q.Class != string(loadgen.InvalidOutput) {
			continue
		}
		if q.Audio == nil || len(q.Audio.Chunks) == 0 {
			if q.Class == string(loadgen.Success) {
				missing++
			}
			continue
		}
		audio++
		chunks += len(q.Audio.Chunks)
		v := loadgen.WaveformViolations(q.Audio.Chunks)
		if declared != nil {
			v = append(v, loadgen.DeclaredFormatViolations(q.Audio.Chunks, *declared)...)
		}
		if len(v) == 0 {
			continue
		}
		violating++
		if violating <= 3 {
			f.failf("request %s: %s", q.ID, strings.Join(v, "; "))
		}
		if q.Class != string(loadgen.InvalidOutput) {
			unmarked++
		}
	}
	if violating > 3 {
		f.failf("%d requests break the waveform invariants in all", violating)
	}
	if unmarked > 0 {
		f.failf("marked_invalid: %d requests break them and are not invalid-output", unmarked)
	}
	if missing > 0 {
		f.errorf("chunks_present: %d successful requests of an audio run have no audio chunk records", missing)
	}
	if audio == 0 && missing == 0 {
		f.errorf("chunks_present: no request of the audio run ended with audio chunk records")
	}
	f.fig("audio_requests", float64(audio))
	f.fig("audio_chunks", float64(chunks))
	f.fig("violating_requests", float64(violating))
	f.fig("unmarked_requests", float64(unmarked))
	f.fig("missing_chunk_records", float64(missing))
}

// checkStreamMatchesFull: seed 000 §4, "最终离线拼接与服务端完整输出在允许误差内一致"
// (the concatenated stream agrees with the server's complete output within
// the allowed error). loadgen's quality pass sent its rows streamed and
// not; every pair it compared must be within its tolerance, and a pass
// that compared none cannot tell. Without a quality pass the rule checks
// nothing. Figures compared_requests, mismatched_requests.
func checkStreamMatchesFull(f *findings, q *loadgen.QualitySummary) {
	if q == nil {
		return
	}
	compared, mismatched := 0, 0
	for _, r := range q.Requests {
		if !r.Compared {
			continue
		}
		compared++
		if r.Match {
			continue
		}
		if mismatched++; mismatched <= 3 {
			rel := "none"
			if r.RelRMS != nil {
				rel = fmt.Sprintf("%.4g", *r.RelRMS)
			}
			f.failf("stream_matches_full: row %d: the concatenated stream has %d samples, the complete output %d (difference %d, allowed %d), relative RMS difference %s (allowed %g)",
				r.Row, r.StreamSamples, r.FullSamples, r.LengthDiffSamples, q.MaxLengthDiffSamples, rel, q.MaxRelRMS)
		}
	}
	f.fig("compared_requests", float64(compared))
	f.fig("mismatched_requests", float64(mismatched))
	if mismatched > 3 {
		f.failf("stream_matches_full: %d of %d compared requests differ in all", mismatched, compared)
	}
	if compared == 0 {
		why := ""
		for _, r := range q.Requests {
			if r.Why != "" {
				why = fmt.Sprintf(" (row %d: %s)", r.Row, r.Why)
				break
			}
		}
		f.errorf("stream_matches_full: the quality pass of %d rows compared no stream with its complete output%s", q.Rows, why)
	}
}
