package crashcheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/notify"
	"warden/pkg/state"
)

// The promises of a campaign that faces a misbehaving notify hook, an
// amendment of a capacity search mid-search, and a process that joins a
// server's SO_REUSEPORT port while its run measures.

// hostileFinal are the end-state checks of those promises: no process of
// the campaign's notifications is left, no notification put more than
// notify.OutputCap bytes into notify.log, and no recorded amendment
// changed a capacity search after one of its points had an attempt.
func hostileFinal(dir string, s *state.Store, runs []state.Run) ([]string, error) {
	var vs []string
	// a notification whose controller was killed ends under its
	// supervisor within its bound: it is given NotifyWait
	var pids []int
	for deadline := time.Now().Add(NotifyWait); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if pids, err = NotifyPIDs(dir); err != nil {
			return nil, err
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(pids) > 0 {
		vs = append(vs, fmt.Sprintf("processes of the campaign's notifications still alive %s after its controller exited: %v", NotifyWait, pids))
	}
	nv, err := notifyLogBounded(dir)
	if err != nil {
		return nil, err
	}
	vs = append(vs, nv...)
	av, err := capacityAmendments(s, runs)
	if err != nil {
		return nil, err
	}
	return append(vs, av...), nil
}

// NotifyWait is how long the end-state check gives the notifications of a
// controller that was killed to end under their supervisors: their bound
// (bench/torture.sh gives 1 s) and the supervisor's slack.
const NotifyWait = 90 * time.Second

// NotifyPIDs lists the live processes that carry the campaign's notify
// marker (notify.DirEnv) in their environment.
func NotifyPIDs(dir string) ([]int, error) {
	marker := []byte("\x00" + notify.DirEnv + "=" + dir + "\x00")
	var pids []int
	err := scan(func(pid int, env []byte) {
		if bytes.Contains(append([]byte{0}, env...), marker) {
			pids = append(pids, pid)
		}
	})
	return pids, err
}

// notifyLogBounded checks that no notification put more than
// notify.OutputCap bytes of output into notify.log: each run's output
// follows its notify.RunHeader line, and a run that passed the cap ends
// it with a notify.DroppedNote line (whether or not its controller lived
// to write the note, nothing past the cap was written).
func notifyLogBounded(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, notify.LogFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vs []string
	// a run cut by its controller's death ends without a newline: its
	// successor's header is found wherever it begins
	for i, run := range bytes.Split(b, []byte(notify.RunHeader))[1:] {
		_, out, _ := bytes.Cut(run, []byte{'\n'}) // after the header's line
		if j := bytes.LastIndex(out, []byte(notify.DroppedNote)); j >= 0 {
			out = out[:j]
		}
		if len(out) > notify.OutputCap {
			vs = append(vs, fmt.Sprintf("%s: notification %d put %d bytes of output in it, more than the %d-byte cap", notify.LogFile, i+1, len(out), notify.OutputCap))
		}
	}
	return vs, nil
}

// capacityAmendments checks that no recorded amendment changed a capacity
// search (anything of it but its on_non_monotonic) after one of the
// search's points had an attempt: those points' verdicts, judged under
// the old search, would stand beside the later points' under the new.
func capacityAmendments(s *state.Store, runs []state.Run) ([]string, error) {
	as, err := s.Amendments()
	if err != nil {
		return nil, err
	}
	var vs []string
	for _, a := range as {
		if a.Kind != "" && a.Kind != "amend" || len(a.Diff) == 0 {
			continue
		}
		var d struct {
			Fields []struct {
				Field string          `json:"field"`
				Old   json.RawMessage `json:"old"`
				New   json.RawMessage `json:"new"`
			} `json:"protocol_changed"`
		}
		if err := json.Unmarshal(a.Diff, &d); err != nil {
			return nil, fmt.Errorf("amendment %s's diff: %w", a.ID, err)
		}
		for _, f := range d.Fields {
			phase, ok := strings.CutPrefix(f.Field, "capacity.")
			if !ok || sameBut(f.Old, f.New, "on_non_monotonic") {
				continue
			}
			for _, r := range runs {
				if r.Phase != phase {
					continue
				}
				ats, err := s.Attempts(r.ID)
				if err != nil {
					return nil, err
				}
				for _, at := range ats {
					if at.CreatedAt.Before(a.RegisteredAt) {
						vs = append(vs, fmt.Sprintf("amendment %s changed capacity search %s at %s, after its point %s had attempt %d (created %s)",
							a.ID, phase, a.RegisteredAt.Format(time.RFC3339Nano), r.ID, at.N, at.CreatedAt.Format(time.RFC3339Nano)))
					}
				}
			}
		}
	}
	return vs, nil
}

// sameBut says whether two JSON objects are the same but for key.
func sameBut(a, b json.RawMessage, key string) bool {
	var x, y map[string]json.RawMessage
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	delete(x, key)
	delete(y, key)
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// Span is a time a process that was not the campaign's held a port.
type Span struct {
	Port     int
	From, To time.Time
}

// ReadSpans reads spans, one a line: PORT FROM_UNIX_NS TO_UNIX_NS.
func ReadSpans(path string) ([]Span, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Span
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s line %d: want PORT FROM_NS TO_NS", path, n)
		}
		var v [3]int64
		for i := range fields {
			if v[i], err = strconv.ParseInt(fields[i], 10, 64); err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, n, err)
			}
		}
		out = append(out, Span{Port: int(v[0]), From: time.Unix(0, v[1]), To: time.Unix(0, v[2])})
	}
	return out, sc.Err()
}

// Margin is how far inside an impostor's span an attempt's end of
// measuring must lie for Impostors to expect it caught: the span's ends
// are the script's readings, around the impostor's own bind and exit.
const Margin = 500 * time.Millisecond

// Impostors checks the attempts against the spans in which an impostor
// held their port: an attempt whose measuring ended (its transition to
// stopping, which follows the listener's last check) well inside one
// must not be complete or quarantined. It returns the violations and how
// many attempts failed naming a port impostor.
func Impostors(dir string, spans []Span) (vs []string, caught int, err error) {
	s, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	events, err := s.Events(0, 0)
	if err != nil {
		return nil, 0, err
	}
	stopping := map[string]time.Time{}
	for _, e := range events {
		if e.Run == "" {
			continue
		}
		k := key(e.Run, e.Attempt)
		if e.To == string(state.Stopping) {
			if _, seen := stopping[k]; !seen {
				stopping[k] = e.Wall
			}
		}
		if e.To == string(state.Failed) && strings.Contains(e.Message, "a port impostor") {
			caught++
		}
	}
	runs, err := s.Runs()
	if err != nil {
		return nil, 0, err
	}
	for _, r := range runs {
		as, err := s.Attempts(r.ID)
		if err != nil {
			return nil, 0, err
		}
		for _, a := range as {
			t, ok := stopping[key(r.ID, a.N)]
			if !ok || (a.State != state.Complete && a.State != state.Quarantined) {
				continue
			}
			for _, sp := range spans {
				if sp.Port == a.Port && t.After(sp.From.Add(Margin)) && t.Before(sp.To.Add(-Margin)) {
					vs = append(vs, fmt.Sprintf("run %s attempt %d is %s, though an impostor held its port %d when its measuring ended (%s, impostor %s..%s)",
						r.ID, a.N, a.State, a.Port, t.Format(time.RFC3339Nano), sp.From.Format(time.RFC3339Nano), sp.To.Format(time.RFC3339Nano)))
				}
			}
		}
	}
	return vs, caught, nil
}
