package contract

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/gates"
	"warden/pkg/loadgen"
)

// waveformDir writes a loadgen result directory: result.json with
// modalities, the default declared audio format, and the records, one
// file.
func waveformDir(t *testing.T, modalities []string, recs ...loadgen.Record) string {
	t.Helper()
	return waveformDirFormat(t, &loadgen.DefaultAudioFormat, modalities, recs...)
}

// waveformDirFormat is waveformDir with the declared format given (nil:
// none in result.json).
func waveformDirFormat(t *testing.T, declared *loadgen.AudioFormat, modalities []string, recs ...loadgen.Record) string {
	t.Helper()
	dir := t.TempDir()
	res := map[string]any{"schema": loadgen.ResultSchema, "modalities": modalities,
		"files": map[string]any{"segments": "segments.jsonl", "requests": []string{"requests/clean-1.jsonl"}}}
	if declared != nil {
		res["audio_format"] = declared
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range recs {
		l, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(l))
	}
	if err := os.MkdirAll(filepath.Join(dir, "requests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "requests", "clean-1.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func audioRec(id string, class loadgen.Class, chunks ...loadgen.AudioChunk) loadgen.Record {
	r := loadgen.Record{Schema: loadgen.RecordSchema, ID: id, Class: class}
	if chunks != nil {
		r.Audio = &loadgen.AudioRecord{Chunks: chunks, MinSamples: 1}
	}
	return r
}

func wchunk(samples, header int64, rate int, offset *int64) loadgen.AudioChunk {
	return loadgen.AudioChunk{Samples: samples, HeaderSamples: header, SampleRate: rate, Channels: 1, BitsPerSample: 16, Offset: offset}
}

func off(v int64) *int64 { return &v }

// TestWaveform: each rule passes a sound request and fails the broken
// one; a violation on a request not marked invalid-output is named; the
// check fails closed when it cannot tell.
func TestWaveform(t *testing.T) {
	audio := []string{"text", "audio"}
	sound := audioRec("ok", loadgen.Success, wchunk(2400, 2400, 24000, off(0)), wchunk(2400, 2400, 24000, off(2400)))
	for _, tc := range []struct {
		name    string
		dir     string
		verdict string
		want    string
	}{
		{"sound", waveformDir(t, audio, sound, audioRec("cut off", loadgen.TransportError)), gates.Pass, "keep the waveform invariants"},
		{"header length", waveformDir(t, audio, sound, audioRec("cut", loadgen.InvalidOutput, wchunk(2397, 2400, 24000, nil))), gates.Fail, "header_length"},
		{"format", waveformDir(t, audio, audioRec("rate", loadgen.InvalidOutput, wchunk(10, 10, 24000, nil), wchunk(10, 10, 16000, nil))), gates.Fail, "format_constant"},
		{"dropped", waveformDir(t, audio, audioRec("drop", loadgen.InvalidOutput, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, off(13)))), gates.Fail, "3 dropped"},
		{"repeated", waveformDir(t, audio, audioRec("dup", loadgen.InvalidOutput, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, off(8)))), gates.Fail, "2 repeated"},
		{"offset missing", waveformDir(t, audio, audioRec("half", loadgen.InvalidOutput, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, nil))), gates.Fail, "carries no offset"},
		{"unmarked", waveformDir(t, audio, audioRec("drop", loadgen.Success, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, off(13)))), gates.Fail, "marked_invalid"},
		{"no chunk records", waveformDir(t, audio, audioRec("none", loadgen.Success)), gates.Error, "chunks_present"},
		{"no request ended", waveformDir(t, audio, audioRec("cut off", loadgen.TransportError)), gates.Error, "chunks_present"},
		{"no audio asked", waveformDir(t, []string{"text"}, sound), gates.Error, "asked for no audio"},
		// a WAV at 1 Hz, consistent in itself, is not what the server declares
		{"1 Hz", waveformDir(t, audio, audioRec("1hz", loadgen.InvalidOutput, wchunk(100000, 100000, 1, nil), wchunk(100000, 100000, 1, nil))), gates.Fail,
			"declared_format: 2 chunk(s) of another format than the server declares, the first (chunk 0) 1 Hz x 1 ch x 16 bit, declared 24000 Hz x 1 ch x 16 bit"},
		{"1 Hz, unmarked", waveformDir(t, audio, audioRec("1hz", loadgen.Success, wchunk(100000, 100000, 1, nil))), gates.Fail, "marked_invalid"},
		{"44.1 kHz declared", waveformDirFormat(t, &loadgen.AudioFormat{SampleRate: 44100, Channels: 1, BitsPerSample: 16}, audio,
			audioRec("ming", loadgen.Success, wchunk(4410, 4410, 44100, nil))), gates.Pass, "keep the waveform invariants"},
		{"no declared format", waveformDirFormat(t, nil, audio, sound), gates.Error, "declared_format: result.json names no declared audio format"},
		{"empty chunk", waveformDir(t, audio, audioRec("empty", loadgen.Success, wchunk(10, 10, 24000, nil), loadgen.AudioChunk{Empty: true}, wchunk(10, 10, 24000, nil))), gates.Pass, "keep the waveform invariants"},
		{"no result", t.TempDir(), gates.Error, "result.json"},
	} {
		r := WaveformDir(tc.dir)
		if r.Verdict != tc.verdict || !strings.Contains(r.Detail, tc.want) {
			t.Errorf("%s: %s (%s), want %s naming %q", tc.name, r.Verdict, r.Detail, tc.verdict, tc.want)
		}
	}
}

// TestWaveformMissingRecordsFile: result.json names a records file that
// is not there: error.
func TestWaveformMissingRecordsFile(t *testing.T) {
	dir := waveformDir(t, []string{"audio"}, audioRec("ok", loadgen.Success, wchunk(1, 1, 24000, nil)))
	if err := os.Remove(filepath.Join(dir, "requests", "clean-1.jsonl")); err != nil {
		t.Fatal(err)
	}
	if r := WaveformDir(dir); r.Verdict != gates.Error {
		t.Fatalf("%s: %s", r.Verdict, r.Detail)
	}
}

// stream_matches_full: the quality pass's comparisons of the concatenated
// stream with the complete output must each be within the pass's
// tolerance; a pass that compared nothing cannot tell; without a pass the
// rule checks nothing.
func TestWaveformStreamMatchesFull(t *testing.T) {
	sound := audioRec("ok", loadgen.Success, wchunk(10, 10, 24000, off(0)), wchunk(10, 10, 24000, off(10)))
	rel := func(v float64) *float64 { return &v }
	withQuality := func(q *loadgen.QualitySummary) string {
		dir := waveformDir(t, []string{"audio"}, sound)
		var res map[string]any
		b, _ := os.ReadFile(filepath.Join(dir, "result.json"))
		json.Unmarshal(b, &res)
		res["quality"] = q
		b, _ = json.Marshal(res)
		os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644)
		return dir
	}
	match := loadgen.QualityRequest{Row: 0, Compared: true, Match: true, StreamSamples: 9600, FullSamples: 9600, RelRMS: rel(0)}
	dropped := loadgen.QualityRequest{Row: 1, Compared: true, StreamSamples: 9595, FullSamples: 9600, LengthDiffSamples: -5, RelRMS: rel(1.3)}
	cases := []struct {
		name    string
		q       *loadgen.QualitySummary
		verdict string
		detail  string
	}{
		{"no quality pass", nil, "pass", ""},
		{"the stream is the complete output", &loadgen.QualitySummary{Rows: 1, MaxRelRMS: 0.01, Requests: []loadgen.QualityRequest{match}}, "pass", ""},
		{"five samples dropped at a boundary", &loadgen.QualitySummary{Rows: 2, MaxRelRMS: 0.01, Requests: []loadgen.QualityRequest{match, dropped}}, "fail",
			"stream_matches_full: row 1: the concatenated stream has 9595 samples, the complete output 9600 (difference -5, allowed 0), relative RMS difference 1.3 (allowed 0.01)"},
		{"nothing compared", &loadgen.QualitySummary{Rows: 1, Requests: []loadgen.QualityRequest{{Row: 0, Why: "no audio in the stream or in the complete output"}}}, "error",
			"stream_matches_full: the quality pass of 1 rows compared no stream with its complete output (row 0: no audio"},
	}
	for _, c := range cases {
		r := WaveformDir(withQuality(c.q))
		if r.Verdict != c.verdict || !strings.Contains(r.Detail, c.detail) {
			t.Errorf("%s: %s %q", c.name, r.Verdict, r.Detail)
		}
	}
}
