package sample

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLast(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu-samples.jsonl")
	if _, err := Last(path); err == nil {
		t.Fatal("Last of a missing file: no error")
	}
	var b strings.Builder
	// more than the tail Last reads, so that its first line is cut
	for i := 0; b.Len() < 3*lastTailBytes; i++ {
		fmt.Fprintf(&b, `{"time":"2026-11-30T12:00:%02dZ","mono_ns":%d,"took_ns":1,"gpus":[{"index":0,"uuid":"u","numa_node":0,"memory_used_mib":%d,"power_w":%d}]}`+"\n", i%60, i, 1000+i, 100+i)
	}
	b.WriteString(`{"kind":"energy","time":"2026-11-30T12:01:00Z","mono_ns":1,"took_ns":1,"gpus":[{"index":0,"uuid":"u","numa_node":0}]}` + "\n")
	b.WriteString(`{"time":"2026-11-30T12:01:01Z","error":"nvml: timeout","mono_ns":2,"took_ns":1}` + "\n")
	b.WriteString(`{"time":"2026-11-30T12:01:02Z","gp`) // cut by a crash
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	gs, err := Last(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(b.String(), "\n") - 2 // the periodic samples
	if len(gs) != 1 || gs[0].MemoryUsedMiB == nil || *gs[0].MemoryUsedMiB != 1000+lines-1 {
		t.Fatalf("Last = %+v: want the last periodic sample, memory %d MiB", gs, 1000+lines-1)
	}
	if err := os.WriteFile(path, []byte(`{"kind":"energy","time":"2026-11-30T12:01:00Z","gpus":[{"index":0}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if gs, err := Last(path); err != nil || gs != nil {
		t.Fatalf("Last of a file without a periodic sample = %+v, %v; want nil, nil", gs, err)
	}
	if err := os.Symlink(path, filepath.Join(dir, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, err := Last(filepath.Join(dir, "link.jsonl")); err == nil {
		t.Fatal("Last followed a link")
	}
}
