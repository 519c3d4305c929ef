package protocols

import (
	"slices"
	"testing"
)

// A command expands as an argument vector, or as a shell line run by
// /bin/sh -c; a variable nobody set fails it.
func TestCommandSpecExpand(t *testing.T) {
	vars := map[string]string{"PORT": "8000"}
	argv, err := CommandSpec{Argv: []string{"serve", "--port", "${PORT}"}}.Expand(vars)
	if err != nil || !slices.Equal(argv, []string{"serve", "--port", "8000"}) {
		t.Fatalf("argv %q, %v", argv, err)
	}
	argv, err = CommandSpec{Shell: "serve --port ${PORT} | tee log"}.Expand(vars)
	if err != nil || !slices.Equal(argv, []string{"/bin/sh", "-c", "serve --port 8000 | tee log"}) {
		t.Fatalf("shell %q, %v", argv, err)
	}
	for _, c := range []CommandSpec{{Argv: []string{"${GPU_IDS}"}}, {Shell: "echo ${GPU_IDS}"}} {
		if _, err := c.Expand(vars); err == nil {
			t.Errorf("%+v expanded without GPU_IDS", c)
		}
	}
	if got := SlotNames([]SlotInfo{{Name: "s0"}, {Name: "s1"}}); !slices.Equal(got, []string{"s0", "s1"}) {
		t.Errorf("SlotNames %q", got)
	}
}
