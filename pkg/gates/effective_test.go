package gates

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEffectiveConfig(t *testing.T) {
	now := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	log := []byte("INFO args: model=/m/qwen tensor_parallel_size=1\nINFO max_num_seqs=256 enable_prefix_caching=False\n")
	tp := Expect{Name: "tp", Pattern: `tensor_parallel_size=1\b`}
	seqs := Expect{Name: "max-num-seqs", Pattern: `max_num_seqs=256`}
	prefix := Expect{Name: "prefix-caching", Pattern: `enable_prefix_caching=True`}
	cases := []struct {
		name    string
		expects []Expect
		verdict string
		matched float64
		detail  []string
		absent  []string
	}{
		{"nothing expected", nil, Pass, 0, nil, nil},
		{"all match", []Expect{tp, seqs}, Pass, 2, nil, nil},
		{"one missing", []Expect{tp, prefix, seqs}, Fail, 2, []string{"prefix-caching (/enable_prefix_caching=True/)"}, []string{"max-num-seqs", "tp ("}},
		{"all missing", []Expect{prefix, {Name: "tp2", Pattern: `tensor_parallel_size=2`}}, Fail, 0, []string{"prefix-caching", "tp2 (/tensor_parallel_size=2/)"}, nil},
		{"bad pattern", []Expect{tp, {Name: "broken", Pattern: `max_num_seqs=(256`}}, Error, 0, []string{"broken", "missing closing )"}, []string{"tp:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := EffectiveConfig(log, c.expects, now)
			if v.Verdict != c.verdict || v.Gate != "effective-config" || !v.At.Equal(now) {
				t.Fatalf("verdict %+v, want %s", v, c.verdict)
			}
			if v.Figures["expected"] != float64(len(c.expects)) || v.Figures["matched"] != c.matched {
				t.Errorf("figures %v, want expected %d matched %v", v.Figures, len(c.expects), c.matched)
			}
			checkDetail(t, v.Detail, c.detail, c.absent)
		})
	}
}

func TestReadServerLog(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadServerLog(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no log: err %v, want ErrNotExist", err)
	}
	if v := EffectiveConfigDir(dir, []Expect{{Name: "x", Pattern: "x"}}, now); v.Verdict != Error {
		t.Fatalf("no log: %+v, want error", v)
	}
	if v := EffectiveConfigDir(dir, nil, now); v.Verdict != Pass {
		t.Fatalf("no log, nothing expected: %+v", v)
	}

	// Only server.err: a missing server.out reads as empty.
	write("server.err", []byte("kv_cache_dtype=fp8\n"))
	if v := EffectiveConfigDir(dir, []Expect{{Name: "kv", Pattern: `(?m)^kv_cache_dtype=fp8$`}}, now); !v.Passed() {
		t.Fatalf("server.err alone: %+v", v)
	}

	// server.out is longer than the bound: its tail is not read, and
	// server.err still is, starting on a line of its own.
	big := bytes.Repeat([]byte("x"), MaxServerLogBytes)
	write("server.out", append([]byte("head-marker\n"), append(big, []byte("tail-marker")...)...))
	text, err := ReadServerLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(text) != MaxServerLogBytes+1+len("kv_cache_dtype=fp8\n") {
		t.Fatalf("read %d bytes, want %d", len(text), MaxServerLogBytes+1+len("kv_cache_dtype=fp8\n"))
	}
	v := EffectiveConfigDir(dir, []Expect{
		{Name: "head", Pattern: "head-marker"},
		{Name: "kv", Pattern: `(?m)^kv_cache_dtype=fp8$`},
		{Name: "tail", Pattern: "tail-marker"},
	}, now)
	if v.Verdict != Fail || v.Figures["matched"] != 2 || !strings.Contains(v.Detail, "tail (/tail-marker/)") || strings.Contains(v.Detail, "head (") {
		t.Fatalf("bounded read: %+v", v)
	}
}
