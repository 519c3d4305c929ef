package provenance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecordAndVerify(t *testing.T) {
	src := t.TempDir()
	camp := t.TempDir()
	client := filepath.Join(src, "client.py")
	os.WriteFile(client, []byte("print('v1')\n"), 0o644)
	privDir := filepath.Join(src, "private")
	os.Mkdir(privDir, 0o700)
	secret := filepath.Join(privDir, "P10.jsonl")
	os.WriteFile(secret, []byte(`{"prompt":"secret"}`), 0o600)

	entries, err := Record(camp, []Entry{{Path: client, Role: "client"}, {Path: secret, Role: "manifest", Private: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries[0].SHA256) != 64 {
		t.Fatalf("hash %q", entries[0].SHA256)
	}
	if _, err := os.Stat(filepath.Join(camp, SubDir, Files, copyName(client))); err != nil {
		t.Fatalf("public file not copied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(camp, SubDir, Files, copyName(secret))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("private file copied: %v", err)
	}
	if err := Verify(camp); err != nil {
		t.Fatalf("unchanged files: %v", err)
	}
	os.WriteFile(client, []byte("print('v2')\n"), 0o644)
	err = Verify(camp)
	var ce *ChangedError
	if !errors.Is(err, ErrChanged) || !errors.As(err, &ce) || ce.Path != client || ce.Recorded != entries[0].SHA256 || ce.Now == "" || ce.Now == ce.Recorded {
		t.Fatalf("changed client: %v", err)
	}
	if !strings.Contains(err.Error(), entries[0].SHA256) {
		t.Fatalf("error lacks the recorded hash: %v", err)
	}
}

func TestPrivatePermissions(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	f := filepath.Join(dir, "x.jsonl")
	os.WriteFile(f, []byte("x"), 0o644)
	if _, err := Record(t.TempDir(), []Entry{{Path: f, Role: "manifest", Private: true}}); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("loose file accepted: %v", err)
	}
	os.Chmod(f, 0o600)
	if _, err := Record(t.TempDir(), []Entry{{Path: f, Role: "manifest", Private: true}}); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("loose directory accepted: %v", err)
	}
}
