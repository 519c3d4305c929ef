package watch

import (
	"context"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/state"
)

// hostileSource is a Source whose records hold text that rewrites a
// terminal.
type hostileSource struct{}

const hostile = "stopped\x1b]0;owned\a\x1b[2J\r\x1b[Kcomplete"

func (hostileSource) Status() (api.Status, error) {
	return api.Status{Campaign: api.CampaignStatus{ID: hostile, State: "stopped", StopReason: state.StopReason(hostile), StopDetail: hostile},
		Runs: api.RunCounts{Total: 1}, Current: []api.Current{{Run: hostile, State: hostile, Slot: hostile}}}, nil
}
func (hostileSource) Runs(context.Context) ([]api.RunBrief, error) { return nil, nil }
func (hostileSource) Events(_ context.Context, after uint64, _ int) ([]state.Event, error) {
	if after > 0 {
		return nil, nil
	}
	return []state.Event{{Seq: 1, Run: hostile, Attempt: 1, To: hostile, Message: hostile}}, nil
}
func (hostileSource) Close() {}

// TestWatchEscapesRecordedText: the live view and its plain lines show
// recorded text escaped; only the view's own styles reach the terminal.
func TestWatchEscapesRecordedText(t *testing.T) {
	w := NewWatcher(t.TempDir(), nil, func() (Source, error) { return hostileSource{}, nil })
	sn, err := w.pollOnce()
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"live view": render(sn, 160), "plain line": plainLine(sn)} {
		if strings.Contains(out, "\x1b]") || strings.Contains(out, "\x1b[2J") || strings.Contains(out, "\x1b[K") || strings.ContainsAny(out, "\r\a") {
			t.Fatalf("%s: a recorded control sequence reaches the terminal:\n%q", what, out)
		}
		if !strings.Contains(out, `\x1b]0;owned\a\x1b[2J\r\x1b[Kcomplete`) {
			t.Fatalf("%s: the recorded text is not shown escaped:\n%q", what, out)
		}
	}
}
