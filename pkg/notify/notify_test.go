package notify_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"warden/internal/testutil/testreaper"
	"warden/pkg/launch"
	"warden/pkg/notify"
	"warden/pkg/state"
)

// testReaper is the one reaper of the test process, which is the
// subreaper of everything the tests start (as the controller is).
var testReaper *launch.Reaper

func TestMain(m *testing.M) {
	os.Exit(testreaper.Run(m, &testReaper))
}

// events is a Store that keeps the events appended.
type events struct {
	mu  sync.Mutex
	cp  state.Campaign
	got []state.Event
}

func (e *events) Campaign() (state.Campaign, error) { return e.cp, nil }

func (e *events) AppendEvent(ev state.Event) (state.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
	return ev, nil
}

// notifier runs command in a directory of its own with the bound
// timeoutS; no cgroups, so what a hook leaves is found by its group and
// its marker.
func notifier(t *testing.T, command string, timeoutS float64) (*notify.Notifier, *events, string) {
	t.Helper()
	dir := t.TempDir()
	st := &events{cp: state.Campaign{ID: "c-1", ProtocolName: "p", State: state.CampaignStopped, StopReason: "validator-failed"}}
	n, err := notify.New(notify.Config{Command: command, TimeoutS: timeoutS, Dir: dir, Store: st, Log: zerolog.Nop(),
		Launcher: &launch.Launcher{Reaper: testReaper}})
	if err != nil {
		t.Fatal(err)
	}
	return n, st, dir
}

// runBounded runs ev through n, failing the test when Run does not
// return within d: what the tests below prove is that it always does.
func runBounded(t *testing.T, n *notify.Notifier, ev notify.Event, d time.Duration) notify.Result {
	t.Helper()
	done := make(chan notify.Result, 1)
	go func() { done <- n.Run(ev) }()
	select {
	case res := <-done:
		return res
	case <-time.After(d):
		t.Fatalf("the notification did not return within %s", d)
		return notify.Result{}
	}
}

// TestEventOfAnySizeNeverBlocks: a stop detail of 200 KB (a validator's
// long detail) was written into the hook's pipe before the hook started,
// and a pipe holds 64 KiB: the controller blocked for ever. The event is
// handed over in memory, its detail cut to DetailCap with a note, and a
// hook that never reads its input changes nothing.
func TestEventOfAnySizeNeverBlocks(t *testing.T) {
	t.Parallel()
	detail := strings.Repeat("é", 100<<10) // 200 KB, two bytes a rune
	got := filepath.Join(t.TempDir(), "event.json")
	for _, c := range []struct{ name, command string }{{"reads nothing", "exit 0"}, {"reads it", "cat > " + got}} {
		t.Run(c.name, func(t *testing.T) {
			n, st, _ := notifier(t, c.command, 30)
			ev := n.EventOf("stopped", st.cp)
			ev.Detail = detail
			res := runBounded(t, n, ev, 20*time.Second)
			if res.Err != nil || res.TimedOut || res.Code != 0 {
				t.Fatalf("result %+v", res)
			}
		})
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	var ev notify.Event
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("the event is not JSON: %v", err)
	}
	if len(ev.Detail) > notify.DetailCap || !utf8.ValidString(ev.Detail) || !strings.HasSuffix(ev.Detail, "bytes more)") || !strings.HasPrefix(ev.Detail, "éé") {
		t.Fatalf("the hook read a detail of %d bytes ending %q, want at most %d, cut at a rune, saying how much more", len(ev.Detail), ev.Detail[max(0, len(ev.Detail)-40):], notify.DetailCap)
	}
	cut := strings.TrimSuffix(ev.Detail[strings.LastIndex(ev.Detail, "... (")+len("... ("):], " bytes more)")
	if more, err := strconv.Atoi(cut); err != nil || more+len(ev.Detail)-len("... ("+cut+" bytes more)") != len(detail) {
		t.Fatalf("the cut says %q bytes more; kept and cut do not add up to %d", cut, len(detail))
	}
}

// pidIn reads the pid a hook wrote to path.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// alive says whether pid is a live process (a zombie is gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestHookLeavesNothingBehind: a hook that exits leaving `sleep 602 &`
// in its group and a setsid daemon outside it (both survived the hook and
// the controller) has both ended before Run returns; the record counts
// them.
func TestHookLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	pids := t.TempDir()
	inGroup, daemon := filepath.Join(pids, "group"), filepath.Join(pids, "daemon")
	n, st, _ := notifier(t, "sleep 602 & echo $! > "+inGroup+"; setsid sleep 603 & echo $! > "+daemon+"; exit 0", 30)
	t.Cleanup(func() {
		for _, p := range []string{inGroup, daemon} {
			if b, err := os.ReadFile(p); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	res := runBounded(t, n, n.EventOf("complete", st.cp), 60*time.Second)
	if res.Err != nil || res.TimedOut || res.Code != 0 {
		t.Fatalf("result %+v", res)
	}
	for _, p := range []string{inGroup, daemon} {
		if pid := pidIn(t, p); alive(pid) {
			t.Fatalf("pid %d (%s) outlived the hook", pid, filepath.Base(p))
		}
	}
	if res.LeftBehind != 2 || len(st.got) != 1 || st.got[0].Figures["left_behind"] != 2 || !strings.Contains(st.got[0].Message, "2 processes it left behind were ended") {
		t.Fatalf("left behind %d; recorded %+v", res.LeftBehind, st.got)
	}
}

// TestHookOutputIsCapped: `yes` wrote 2.2 GB to notify.log in a 3 s
// bound. One run keeps OutputCap bytes, counts the rest, drops it, and
// says so in the log and the record; a flood that never ends is ended at
// the bound all the same.
func TestHookOutputIsCapped(t *testing.T) {
	t.Parallel()
	t.Run("ends", func(t *testing.T) {
		t.Parallel()
		const wrote = 3_000_000
		n, st, dir := notifier(t, "head -c "+strconv.Itoa(wrote)+" /dev/zero", 30)
		res := runBounded(t, n, n.EventOf("complete", st.cp), 60*time.Second)
		if res.Err != nil || res.Code != 0 || res.Output != notify.OutputCap || res.Dropped != wrote-notify.OutputCap {
			t.Fatalf("result %+v, want %d kept and %d dropped", res, notify.OutputCap, wrote-notify.OutputCap)
		}
		b, err := os.ReadFile(filepath.Join(dir, notify.LogFile))
		if err != nil {
			t.Fatal(err)
		}
		note := "[warden] notify: " + strconv.Itoa(wrote-notify.OutputCap) + " bytes of output past the 1048576-byte cap were dropped\n"
		head, out, _ := strings.Cut(string(b), "\n")
		if !strings.HasPrefix(head, "[warden] notification complete at ") || len(out) != notify.OutputCap+len(note) || !strings.HasSuffix(out, note) {
			t.Fatalf("notify.log holds %q, then %d bytes ending %q; want the run's line, %d bytes and the note %q", head, len(out), out[max(0, len(out)-100):], notify.OutputCap, note)
		}
		if f := st.got[0].Figures; f["output_bytes"] != notify.OutputCap || f["output_dropped_bytes"] != wrote-notify.OutputCap {
			t.Fatalf("recorded figures %v", f)
		}
	})
	t.Run("floods", func(t *testing.T) {
		t.Parallel()
		n, st, dir := notifier(t, "exec yes", 0.5)
		res := runBounded(t, n, n.EventOf("complete", st.cp), 60*time.Second)
		if !res.TimedOut || res.Output != notify.OutputCap || res.Dropped <= 0 {
			t.Fatalf("result %+v, want ended at its bound with %d bytes kept and more dropped", res, notify.OutputCap)
		}
		fi, err := os.Stat(filepath.Join(dir, notify.LogFile))
		if err != nil || fi.Size() > notify.OutputCap+200 {
			t.Fatalf("notify.log %v (%v), want at most the cap and its note", fi.Size(), err)
		}
	})
}

// TestHookIgnoringSIGTERMEndedAtItsBound: a hook that ignores SIGTERM and
// never exits is killed at its bound, its group with it.
func TestHookIgnoringSIGTERMEndedAtItsBound(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	n, st, _ := notifier(t, "trap '' TERM; sleep 601 & echo $! > "+pidFile+"; wait; wait", 0.3)
	res := runBounded(t, n, n.EventOf("complete", st.cp), 60*time.Second)
	if !res.TimedOut || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	if pid := pidIn(t, pidFile); alive(pid) {
		t.Fatalf("the hook's child %d outlived its bound", pid)
	}
	if !strings.Contains(st.got[0].Message, "ended at its bound of 0.3 s") || st.got[0].Figures["timed_out"] != 1 {
		t.Fatalf("recorded %+v", st.got)
	}
}

// TestCheckTimeout: --notify-timeout-s 1e300 overflowed to a negative
// duration and the hook was killed at once. A bound is positive and at
// most a day.
func TestCheckTimeout(t *testing.T) {
	for _, c := range []struct {
		s    float64
		want time.Duration
	}{{30, 30 * time.Second}, {0.5, 500 * time.Millisecond}, {86400, 24 * time.Hour},
		{0, 0}, {-1, 0}, {86400.001, 0}, {1e300, 0}, {math.Inf(1), 0}, {math.NaN(), 0}} {
		d, err := notify.CheckTimeout(c.s)
		if d != c.want || (err == nil) != (c.want > 0) {
			t.Errorf("CheckTimeout(%g) = %v, %v; want %v", c.s, d, err, c.want)
		}
		if _, err := notify.New(notify.Config{Command: "true", TimeoutS: c.s}); (err == nil) != (c.want > 0) {
			t.Errorf("New with %g s: %v", c.s, err)
		}
	}
}

// TestCut: a cut keeps whole runes and stays within its limit.
func TestCut(t *testing.T) {
	if got := notify.Cut("short", 10); got != "short" {
		t.Fatalf("%q", got)
	}
	for limit := 20; limit < 40; limit++ {
		got := notify.Cut(strings.Repeat("日本", 50), limit)
		if len(got) > limit || !utf8.ValidString(got) || !strings.HasSuffix(got, "bytes more)") {
			t.Fatalf("limit %d: %q (%d bytes)", limit, got, len(got))
		}
	}
}

// TestEndLeftovers: a hook whose controller died first survived it (a
// notification has no bound of its own once its controller is gone); the
// next controller of the campaign ends every process carrying the
// campaign's notify marker, and no other.
func TestEndLeftovers(t *testing.T) {
	t.Parallel()
	dir, other := t.TempDir(), t.TempDir()
	l := &launch.Launcher{Reaper: testReaper}
	start := func(d string) *launch.Proc {
		p, err := l.Start(launch.Spec{Role: "left", Argv: []string{"sleep", "600"}, Env: append(os.Environ(), notify.DirEnv+"="+d)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if alive(p.PID) {
				syscall.Kill(p.PID, syscall.SIGKILL)
				<-p.Done()
			}
		})
		return p
	}
	mine, theirs := start(dir), start(other)
	n, err := notify.EndLeftovers(dir, nil)
	if err != nil || n != 1 {
		t.Fatalf("EndLeftovers = %d, %v; want the one process of this campaign", n, err)
	}
	select {
	case <-mine.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the left-over notification was not ended")
	}
	if !alive(theirs.PID) {
		t.Fatal("another campaign's notification was ended")
	}
}

// TestSupervise: the supervisor's side runs one notification from the
// event on its input and reports the result as one JSON line.
func TestSupervise(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	got := filepath.Join(t.TempDir(), "event.json")
	var out strings.Builder
	in := strings.NewReader(`{"schema":1,"event":"complete","campaign_id":"c-1","detail":"x"}` + "\n")
	err := notify.Supervise(notify.Config{Command: "cat > " + got + "; exit 4", TimeoutS: 30, Dir: dir, Log: zerolog.Nop(),
		Launcher: &launch.Launcher{Reaper: testReaper}}, in, &out)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res["exit_code"] != 4.0 || res["timed_out"] != false {
		t.Fatalf("report %q (%v)", out.String(), err)
	}
	if b, err := os.ReadFile(got); err != nil || !strings.Contains(string(b), `"campaign_id":"c-1"`) {
		t.Fatalf("the hook read %q (%v)", b, err)
	}
}

// TestAtEndNotifiesWhatNeedsAPerson: at the campaign's end the hook runs
// when a person is needed (complete; stopped for review, with the stop's
// reason and detail), and not for an operator's own stop or a campaign
// that has not ended; what ran is recorded, and nothing else is.
func TestAtEndNotifiesWhatNeedsAPerson(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		cp     state.Campaign
		want   string // the event the hook reads; "" none
		reason string
	}{
		{"complete", state.Campaign{State: state.CampaignComplete}, "complete", ""},
		{"stopped for review", state.Campaign{State: state.CampaignStopped, StopReason: state.StopBudget, StopDetail: "3.9 of 4 GPU-hours"}, "stopped", "budget"},
		{"operator's stop", state.Campaign{State: state.CampaignStopped, StopReason: state.StopOperator, StopDetail: "by hand"}, "", ""},
		{"running", state.Campaign{State: state.CampaignRunning}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := filepath.Join(t.TempDir(), "event.json")
			n, st, dir := notifier(t, "cat > "+got, 30)
			c.cp.ID, c.cp.ProtocolName = "c-1", "p"
			st.cp = c.cp
			n.AtEnd()
			b, err := os.ReadFile(got)
			if c.want == "" {
				if err == nil || len(st.got) != 0 {
					t.Fatalf("the hook ran (read %q); recorded %+v; want nothing", b, st.got)
				}
				return
			}
			if err != nil {
				t.Fatalf("the hook read nothing: %v", err)
			}
			var ev notify.Event
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatalf("the event is not JSON: %v\n%s", err, b)
			}
			if ev.Schema != notify.Schema || ev.Event != c.want || ev.State != string(c.cp.State) || ev.Campaign != "c-1" || ev.Protocol != "p" ||
				ev.Dir != dir || ev.Reason != c.reason || ev.Detail != c.cp.StopDetail {
				t.Fatalf("event %+v, want %s of c-1 (reason %q, detail %q)", ev, c.want, c.reason, c.cp.StopDetail)
			}
			if len(st.got) != 1 || st.got[0].Reason != "notify" || !strings.Contains(st.got[0].Message, "notified "+c.want) {
				t.Fatalf("recorded %+v, want one notify record", st.got)
			}
		})
	}
}

// TestFailingHookRecordsItsExit: a hook that exits 3 is recorded with
// that exit code and says so; the campaign is not held by it.
func TestFailingHookRecordsItsExit(t *testing.T) {
	t.Parallel()
	n, st, _ := notifier(t, "exit 3", 30)
	res := runBounded(t, n, n.EventOf("complete", st.cp), 20*time.Second)
	if res.Err != nil || res.TimedOut || res.Code != 3 {
		t.Fatalf("result %+v, want exit 3", res)
	}
	if len(st.got) != 1 || st.got[0].Figures["exit_code"] != 3 || st.got[0].Figures["timed_out"] != 0 ||
		!strings.Contains(st.got[0].Message, "notified complete: the command exited 3 after") {
		t.Fatalf("recorded %+v", st.got)
	}
}
