package planview

import (
	"strings"
	"testing"

	"warden/protocols"
)

// TestInputsHint (issue 39, friction 6): problems among which are inputs
// this machine lacks name --check-inputs=false; problems of the
// protocol's own do not.
func TestInputsHint(t *testing.T) {
	in := protocols.Problem{Field: "provenance[0].path", Msg: "m.jsonl does not exist", Input: true}
	own := protocols.Problem{Field: "slots[0].gpus", Msg: "GPU 7 is outside the host"}
	for _, tt := range []struct {
		list []protocols.Problem
		want string
	}{
		{[]protocols.Problem{in}, "this problem is an input this machine lacks"},
		{[]protocols.Problem{in, in}, "every one of these problems is an input this machine lacks"},
		{[]protocols.Problem{in, own}, "1 of these problems is an input this machine lacks"},
		{[]protocols.Problem{own}, ""},
	} {
		h := InputsHint(&protocols.Problems{List: tt.list})
		if tt.want == "" && h != "" || !strings.HasPrefix(h, tt.want) || tt.want != "" && !strings.Contains(h, "controller plan --check-inputs=false") {
			t.Errorf("%d problems: %q, want %q...", len(tt.list), h, tt.want)
		}
	}
}
