package report

import (
	"bytes"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/state"
)

// TestAmendmentReasonOnce (issue 39, friction 3): the Amendments section
// prints an amendment's reason once (controller amend records it as its
// title and its text), and both where they differ.
func TestAmendmentReasonOnce(t *testing.T) {
	reason := "max-num-seqs 16: the server refused 8"
	d := &Data{Rep: api.Report{Amendments: []state.Amendment{
		{ID: "A-1", Kind: "amend", Date: "2026-12-03", Title: reason, Text: reason, Runs: []string{"p1.saturation"}},
		{ID: "A-2", Kind: "amend", Title: "longer drain", Text: "P10-class 600 s"},
	}}}
	var b bytes.Buffer
	if err := WriteHTML(&b, d); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if n := strings.Count(page, reason); n != 1 || !strings.Contains(page, "<b>A-1</b> amend (2026-12-03): "+reason+` <span class="muted">runs p1.saturation</span>`) {
		t.Fatalf("the reason is printed %d times:\n%s", n, page[strings.Index(page, "<h2>Amendments"):][:600])
	}
	if !strings.Contains(page, "<b>A-2</b> amend: longer drain P10-class 600 s") {
		t.Fatalf("a title and a text that differ are not both printed")
	}
}
