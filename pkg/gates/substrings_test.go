package gates

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// indexed lists the values an index holds, in order.
func indexed(x *PrivateIndex) []string {
	var out []string
	start := 0
	for _, e := range x.ends {
		out = append(out, string(x.text[start:e]))
		start = int(e)
	}
	return out
}

func TestIndexPrivate(t *testing.T) {
	long := "Write a detailed history of the Straits Settlements, covering trade, law and the" // 80 bytes
	chat := "You are reviewing a contract between two parties; list every clause"
	cases := []struct {
		name    string
		content string
		minLen  int
		want    []string
		short   int
		err     bool
	}{
		{name: "JSON lines manifest: whole values",
			content: `{"id": 1, "model": "/models/Qwen3-30B-A3B-Instruct-2507", "prompt": "` + long + `", "output_len": 512}` + "\n" +
				`{"id": 2, "messages": [{"role": "system", "content": "short"}, {"role": "user", "content": "` + chat + `"}]}` + "\n",
			minLen: 48, want: []string{long, chat}, short: 3}, // "system", "short" and "user": every string under messages
		{name: "top-level array",
			content: ` [ {"prompt": "` + chat + `"}, {"prompt": "tiny"}, {"meta": {"content": "` + long + `"}} ]`,
			minLen:  48, want: []string{chat, long}, short: 1},
		{name: "one JSON document, nested, escapes decoded",
			content: `{"requests": {"a": {"prompt": {"text": "line one\nline \"two\" of the prompt, long enough here"}}}}`,
			minLen:  16, want: []string{"line one\nline \"two\" of the prompt, long enough here"}},
		{name: "plain text lines",
			content: "  " + long + "\n\nshort line\n" + chat + "\r\n",
			minLen:  48, want: []string{long, chat}, short: 1},
		{name: "text that starts like JSON",
			content: "{not json} " + chat + "\nsecond line of the source text\n",
			minLen:  16, want: []string{"{not json} " + chat, "second line of the source text"}},
		{name: "a later bad line is an error",
			content: `{"prompt": "` + chat + `"}` + "\n" + `{"prompt": ` + "\n",
			minLen:  16, err: true},
		{name: "a leak length below the floor is an error", content: "x", minLen: 8, err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "manifest")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			x, err := IndexPrivate([]string{path}, c.minLen)
			if (err != nil) != c.err {
				t.Fatalf("err %v, want error %v", err, c.err)
			}
			if err != nil {
				return
			}
			if got := indexed(x); strings.Join(got, "|") != strings.Join(c.want, "|") || x.Short() != c.short {
				t.Fatalf("got %q (short %d), want %q (short %d)", got, x.Short(), c.want, c.short)
			}
		})
	}
	// A very long line is read in pieces and kept whole.
	path := filepath.Join(t.TempDir(), "source.txt")
	huge := strings.Repeat("lorem ipsum dolor sit amet ", 200000) // 5.4 MB, longer than the read buffer
	if err := os.WriteFile(path, []byte(huge+"\n"+chat+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	x, err := IndexPrivate([]string{path}, 48)
	if got := indexed(x); err != nil || len(got) != 2 || got[0] != strings.TrimSpace(huge) || got[1] != chat {
		t.Fatalf("long line: %d values, %v", len(got), err)
	}
	if _, err := IndexPrivate([]string{filepath.Join(t.TempDir(), "missing")}, 48); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestIndexPrivateScan indexes a manifest and finds a piece from the
// middle of a prompt, logged, and not a shorter one.
func TestIndexPrivateScan(t *testing.T) {
	prompt := "Translate the attached letter from Hokkien to English, keeping the honorifics exactly as written, and list any names you could not read"
	manifest := filepath.Join(t.TempDir(), "p10.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"prompt": "`+prompt+`", "max_tokens": 512}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	x, err := IndexPrivate([]string{manifest}, DefaultMinLeakBytes)
	if err != nil {
		t.Fatal(err)
	}
	mid := prompt[41 : 41+DefaultMinLeakBytes]
	leaked := tree(t, map[string][]byte{"client.log": []byte("ERROR request 3 failed: ..." + mid + "...\n")})
	short := tree(t, map[string][]byte{"client.log": []byte("ERROR request 3 failed: ..." + mid[:DefaultMinLeakBytes-1] + "...\n")})
	now := time.Now()
	if v := PrivacyScan(leaked, forbidden, x, nil, 1<<20, now); v.Verdict != Fail || !strings.Contains(v.Detail, substringID([]byte(prompt))) {
		t.Fatalf("leak not found: %+v", v)
	}
	if v := PrivacyScan(short, forbidden, x, nil, 1<<20, now); !v.Passed() || v.Figures["private_values"] != 1 {
		t.Fatalf("47 bytes: %+v", v)
	}
}
