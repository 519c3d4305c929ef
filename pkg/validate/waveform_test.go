package validate

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
// modalities and the records, one file.
func waveformDir(t *testing.T, modalities []string, recs ...loadgen.Record) string {
	t.Helper()
	dir := t.TempDir()
	res := map[string]any{"schema": loadgen.ResultSchema, "modalities": modalities,
		"files": map[string]any{"segments": "segments.jsonl", "requests": []string{"requests/clean-1.jsonl"}}}
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
