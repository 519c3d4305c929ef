package cli

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/spf13/cobra"
)

func TestStatusOf(t *testing.T) {
	cause := errors.New("refused")
	wrapped := fmt.Errorf("run: %w", &ExitError{Code: 3, Err: cause})
	if s := StatusOf(wrapped, 1); s.Code != 3 || s.Cause != cause || !s.Carried {
		t.Errorf("StatusOf(wrapped ExitError) = %+v, want code 3, the cause, carried", s)
	}
	plain := errors.New("plain")
	if s := StatusOf(plain, 7); s.Code != 7 || s.Cause != plain || s.Carried {
		t.Errorf("StatusOf(plain) = %+v, want the default 7 and the error itself", s)
	}
	if got := (&ExitError{Code: 2, Err: cause}).Error(); got != "refused" {
		t.Errorf("ExitError.Error() = %q, want the cause's text", got)
	}
}

func TestRun(t *testing.T) {
	ok := &cobra.Command{Use: "ok", RunE: func(*cobra.Command, []string) error { return nil }}
	ok.SetArgs(nil)
	if code := Run(ok, 1, func(*cobra.Command, error, Status) { t.Error("report called on success") }); code != 0 {
		t.Errorf("Run(success) = %d, want 0", code)
	}
	fail := &cobra.Command{Use: "fail", SilenceErrors: true, SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error { return &ExitError{Code: 4, Err: errors.New("bad")} }}
	fail.SetArgs(nil)
	var reported Status
	if code := Run(fail, 1, func(_ *cobra.Command, _ error, s Status) { reported = s }); code != 4 || reported.Code != 4 {
		t.Errorf("Run(failure) = %d, reported %+v; want 4", code, reported)
	}
}

// A pipe and /dev/null are no terminal; a pseudo-terminal is.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if IsTerminal(r) || IsTerminal(w) || IsTerminal(null) {
		t.Fatal("a pipe or /dev/null taken for a terminal")
	}
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skip("no pseudo-terminals here:", err)
	}
	defer ptmx.Close()
	if !IsTerminal(ptmx) {
		t.Fatal("a pseudo-terminal's master not taken for a terminal")
	}
}
