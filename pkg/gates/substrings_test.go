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

func TestPrivateSubstrings(t *testing.T) {
	long := "Write a detailed history of the Straits Settlements, covering trade, law and the" // 80 bytes
	chat := "You are reviewing a contract between two parties; list every clause"
	uni := strings.Repeat("a", 62) + "é and the rest" // é spans bytes 62-63: the 64-byte cut keeps it whole
	cases := []struct {
		name    string
		content string
		minLen  int
		max     int
		want    []string
		err     bool
	}{
		{name: "JSON lines manifest",
			content: `{"id": 1, "model": "/models/Qwen3-30B-A3B-Instruct-2507", "prompt": "` + long + `", "output_len": 512}` + "\n" +
				`{"id": 2, "messages": [{"role": "system", "content": "short"}, {"role": "user", "content": "` + chat + `"}]}` + "\n" +
				`{"id": 3, "prompt": "` + long + `"}` + "\n",
			minLen: 16, max: 10,
			want: []string{long[:64], chat[:64]}},
		{name: "top-level array",
			content: ` [ {"prompt": "` + chat + `"}, {"prompt": "tiny"}, {"meta": {"content": "` + long + `"}} ]`,
			minLen:  16, max: 10,
			want: []string{chat[:64], long[:64]}},
		{name: "one JSON document, nested",
			content: `{"requests": {"a": {"prompt": {"text": "` + chat + `"}}}}`,
			minLen:  16, max: 10,
			want: []string{chat[:64]}},
		{name: "cut at a character boundary",
			content: `{"prompt": "` + uni + `"}`, minLen: 16, max: 10,
			want: []string{uni[:64]}},
		{name: "cut inside a character backs off",
			content: `{"prompt": "` + "b" + uni + `"}`, minLen: 16, max: 10,
			want: []string{("b" + uni)[:63]}},
		{name: "bounded in count",
			content: `{"prompt": "` + long + `"}` + "\n" + `{"prompt": "` + chat + `"}` + "\n",
			minLen:  16, max: 1,
			want: []string{long[:64]}},
		{name: "minLen below the floor is raised",
			content: `{"prompt": "fifteen bytes.."}` + "\n" + `{"prompt": "sixteen bytes..."}`,
			minLen:  4, max: 10,
			want: []string{"sixteen bytes..."}},
		{name: "minLen above the prefix length takes minLen bytes",
			content: `{"prompt": "` + long + `"}` + "\n" + `{"prompt": "` + chat + `"}`,
			minLen:  70, max: 10,
			want: []string{long[:70]}},
		{name: "plain text lines",
			content: "  " + long + "\n\nshort line\n" + chat + "\r\n" + long + "\n",
			minLen:  16, max: 10,
			want: []string{long[:64], chat[:64]}},
		{name: "text that starts like JSON",
			content: "{not json} " + chat + "\nsecond line of the source text\n",
			minLen:  16, max: 10,
			want: []string{("{not json} " + chat)[:64], "second line of the source text"}},
		{name: "a later bad line is an error",
			content: `{"prompt": "` + chat + `"}` + "\n" + `{"prompt": ` + "\n",
			minLen:  16, max: 10,
			want: []string{chat[:64]}, err: true},
		{name: "max must be positive", content: "x", minLen: 16, max: 0, err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "manifest")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := PrivateSubstrings(path, c.minLen, c.max)
			if (err != nil) != c.err {
				t.Fatalf("err %v, want error %v", err, c.err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			for i := range got {
				if string(got[i]) != c.want[i] {
					t.Fatalf("got %q, want %q", got, c.want)
				}
			}
		})
	}
	// A very long line is read in pieces and only its head kept.
	path := filepath.Join(t.TempDir(), "source.txt")
	huge := strings.Repeat("lorem ipsum dolor sit amet ", 200000) // 5.4 MB, longer than the read buffer
	if err := os.WriteFile(path, []byte(huge+"\n"+chat+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := PrivateSubstrings(path, 16, 10)
	if err != nil || len(got) != 2 || string(got[0]) != huge[:64] || string(got[1]) != chat[:64] {
		t.Fatalf("long line: %q, %v", got, err)
	}
	if _, err := PrivateSubstrings(filepath.Join(t.TempDir(), "missing"), 16, 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestPrivateSubstringsScan derives substrings from a manifest and finds a
// logged prompt prefix with them.
func TestPrivateSubstringsScan(t *testing.T) {
	prompt := "Translate the attached letter from Hokkien to English, keeping the honorifics exactly"
	manifest := filepath.Join(t.TempDir(), "p10.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"prompt": "`+prompt+`", "max_tokens": 512}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	subs, err := PrivateSubstrings(manifest, 16, 100)
	if err != nil {
		t.Fatal(err)
	}
	leaked := tree(t, map[string][]byte{"client.log": []byte("ERROR request 3 failed: " + prompt[:70] + "...\n")})
	clean := tree(t, map[string][]byte{"client.log": []byte("ERROR request 3 failed: timeout\n")})
	now := time.Now()
	if v := PrivacyScan(leaked, forbidden, subs, nil, 1<<20, now); v.Verdict != Fail || !strings.Contains(v.Detail, substringID([]byte(prompt[:64]))) {
		t.Fatalf("leak not found: %+v", v)
	}
	if v := PrivacyScan(clean, forbidden, subs, nil, 1<<20, now); !v.Passed() || v.Figures["substrings"] != 1 {
		t.Fatalf("clean directory: %+v", v)
	}
}
