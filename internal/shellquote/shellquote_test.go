package shellquote

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A shell splits Join's line back into the same words, whatever they hold.
func TestJoinRoundTrip(t *testing.T) {
	t.Parallel()
	argv := []string{"plain", "", "with space", "it's", `back\slash`, "$HOME", "a;b|c&d", "*?[x]", "~user", "new\nline", "üñí", "--flag=v,1", "{a,b}", "!bang", "#hash"}
	got, err := exec.Command("sh", "-c", "for a in "+Join(argv)+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Split(strings.TrimSuffix(string(got), "\x00"), "\x00")
	if !slices.Equal(words, argv) {
		t.Fatalf("the shell read %q back as %q", Join(argv), words)
	}
}

func TestWordLeavesSafeWordsAlone(t *testing.T) {
	t.Parallel()
	for _, w := range []string{"vllm", "--port=8000", "/a/b.c", "user@host:1", "50%"} {
		if Word(w) != w {
			t.Errorf("Word(%q) = %q, want it unchanged", w, Word(w))
		}
	}
	if Word("a b") != "'a b'" || Word("") != "''" || Word("it's") != `'it'\''s'` {
		t.Errorf("Word quoted %q %q %q", Word("a b"), Word(""), Word("it's"))
	}
}
