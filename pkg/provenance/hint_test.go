package provenance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMissingHint: for every recorded input that is missing or no longer
// a regular file, the hint names its kept copy, says a private input has
// none, or says the copy is gone; a changed input gets no hint.
func TestMissingHint(t *testing.T) {
	src := t.TempDir()
	camp := t.TempDir()
	client, secret := clientAndSecret(t, src)
	server := filepath.Join(src, "server.sh")
	writeFile(t, server, []byte("exec true\n"), 0o644)
	entries, err := Record(camp, []Entry{{Path: client, Role: "client"}, {Path: secret, Role: "manifest", Private: true}, {Path: server, Role: "server"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(camp); err != nil {
		t.Fatal(err)
	}

	// changed, not missing: no hint
	writeFile(t, client, []byte("print('v2')\n"), 0o644)
	if err := Verify(camp); err == nil {
		t.Fatal("a changed input verified")
	} else if h := MissingHint(camp, err); h != "" {
		t.Fatalf("hint for a changed input: %q", h)
	}

	os.Remove(client)
	os.Remove(secret)
	os.Remove(server)
	if err := syscall.Mkfifo(server, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(camp, SubDir, Files, entries[2].SHA256)) // the server's copy is lost too
	err = Verify(camp)
	if err == nil {
		t.Fatal("missing inputs verified")
	}
	h := MissingHint(camp, err)
	copyDir := filepath.Join(camp, SubDir, Files)
	want := []string{
		"restore " + client + " from its copy " + filepath.Join(copyDir, entries[0].SHA256),
		secret + " is private: hashed only, no copy kept (sha256 " + entries[1].SHA256 + ")",
		"no copy of " + server + " (sha256 " + entries[2].SHA256 + ") is left in " + copyDir,
	}
	if !strings.HasPrefix(h, "; ") {
		t.Fatalf("hint %q does not follow a summary", h)
	}
	for _, w := range want {
		if !strings.Contains(h, w) {
			t.Errorf("hint lacks %q:\n%s", w, h)
		}
	}
	if n := strings.Count(h, "; "); n != len(want) {
		t.Errorf("%d hints, want %d: %s", n, len(want), h)
	}
}

// TestMissingHintUnrecorded: an error about a path that is not recorded,
// or that is no provenance error at all, gives no hint.
func TestMissingHintUnrecorded(t *testing.T) {
	camp := t.TempDir()
	client := filepath.Join(t.TempDir(), "client.py")
	writeFile(t, client, []byte("print(1)\n"), 0o644)
	if _, err := Record(camp, []Entry{{Path: client, Role: "client"}}, Options{}); err != nil {
		t.Fatal(err)
	}
	other := &NotRegularError{Path: "/elsewhere", Kind: "FIFO"}
	for _, err := range []error{other, errors.New("read SHA256SUMS: boom"), errors.Join(other, errors.New("x"))} {
		if h := MissingHint(camp, err); h != "" {
			t.Errorf("hint for %v: %q", err, h)
		}
	}
}
