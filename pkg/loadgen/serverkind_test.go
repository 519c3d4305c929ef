package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestServerKindReasoning: vLLM's chat reasoning text is delta.reasoning,
// SGLang's delta.reasoning_content; each kind counts its own field as
// tokens, auto both. The first chunk with choices (the role chunk) is
// recorded apart from the first token.
func TestServerKindReasoning(t *testing.T) {
	stream := func(field string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
			for range 2 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{%q:\"r\"}}]}\n\n", field)
			}
			for range 2 {
				fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n")
			}
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
		}
	}
	for _, tc := range []struct {
		field  string
		kind   ServerKind
		chunks int
	}{
		{"reasoning", ServerVLLM, 4}, {"reasoning", ServerSGLang, 2}, {"reasoning", ServerAuto, 4},
		{"reasoning_content", ServerSGLangOmni, 4}, {"reasoning_content", ServerVLLMOmni, 2}, {"reasoning_content", "", 4},
	} {
		srv := httptest.NewServer(stream(tc.field))
		clock, _ := NewClock()
		s := testSenders(t, srv.URL, clock)["h1"]
		s.kind = tc.kind
		o := s.send(context.Background(), []byte(`{}`), expect{output: 4, exact: true})
		srv.Close()
		if o.class != Success || o.chunks != tc.chunks || o.firstChunk == 0 || o.firstToken < o.firstChunk {
			t.Errorf("%s read as %q: class %s, %d token chunks (want %d), first chunk %d, first token %d",
				tc.field, tc.kind, o.class, o.chunks, tc.chunks, o.firstChunk, o.firstToken)
		}
	}
	if _, err := ParseServerKind("tgi"); err == nil {
		t.Error("an unknown server kind was accepted")
	}
}

func TestHasChoices(t *testing.T) {
	for p, want := range map[string]bool{
		`{"choices":[{"text":""}]}`: true, `{"choices": [ ]}`: false, `{"choices":[]}`: false, `{"usage":{}}`: false, `{"choices":`: false, `{"choices":[null]}`: true,
	} {
		if c, _ := readChunk([]byte(p), ServerAuto); c.choices != want {
			t.Errorf("choices of %s: %v", p, !want)
		}
	}
}
