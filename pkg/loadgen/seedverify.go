package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// VerifySeedRecords checks a result directory's requests.jsonl and
// events.jsonl against result.json's seed_records block (info): each file
// holds the lines the block counts; the request lines are rows 0, 1, ...
// in order, each once, with a status of the taxonomy, counted by status
// and by sent as the block says; each request's events follow its line's
// order, are its own, in time order, planned first at its planned time,
// a sent event exactly when it was sent and no output before it, and one
// terminal, last, with the request's status. It returns the first fault,
// nil when the files are complete and consistent; a block that is absent
// is a fault (nothing to check against).
func VerifySeedRecords(dir string, info *SeedRecordsInfo) error {
	if info == nil {
		return fmt.Errorf("result.json has no seed_records block")
	}
	reqs, err := readSeedLines[SeedRequest](filepath.Join(dir, info.RequestsFile))
	if err != nil {
		return err
	}
	if len(reqs) != info.Requests || len(reqs) != info.Planned {
		return fmt.Errorf("%s holds %d lines, result.json says %d requests, %d planned", info.RequestsFile, len(reqs), info.Requests, info.Planned)
	}
	f, err := os.Open(filepath.Join(dir, info.EventsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, MaxLineBytes)
	taxonomy := map[string]bool{}
	for _, s := range SeedStatuses() {
		taxonomy[s] = true
	}
	byStatus, sent, events := map[string]int{}, 0, 0
	for i, q := range reqs {
		switch {
		case q.Schema != SeedRequestSchema || q.RunID != info.RunID:
			return fmt.Errorf("request line %d: schema %q, run %q", i, q.Schema, q.RunID)
		case q.Row != i:
			return fmt.Errorf("request line %d is row %d: rows are listed once each, in order", i, q.Row)
		case !taxonomy[q.Status]:
			return fmt.Errorf("request %s: status %q is not of the taxonomy", q.RequestID, q.Status)
		}
		byStatus[q.Status]++
		if q.Sent {
			sent++
		}
		evs, err := nextEvents(sc, q.Events)
		if err != nil {
			return fmt.Errorf("%s, request %s: %w", info.EventsFile, q.RequestID, err)
		}
		if err := checkRequestEvents(&q, evs); err != nil {
			return fmt.Errorf("request %s: %w", q.RequestID, err)
		}
		events += len(evs)
	}
	if sc.Scan() {
		return fmt.Errorf("%s holds lines past the last request's events", info.EventsFile)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if events != info.Events || sent != info.Sent || len(reqs)-sent != info.Unsent {
		return fmt.Errorf("%d events, %d sent, %d unsent; result.json says %d, %d, %d", events, sent, len(reqs)-sent, info.Events, info.Sent, info.Unsent)
	}
	for s := range taxonomy {
		if byStatus[s] != info.ByStatus[s] {
			return fmt.Errorf("%d requests are %s, result.json says %d", byStatus[s], s, info.ByStatus[s])
		}
	}
	return nil
}

// nextEvents reads n event lines.
func nextEvents(sc *bufio.Scanner, n int) ([]SeedEvent, error) {
	evs := make([]SeedEvent, 0, n)
	for range n {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("the file ends before its %d events", n)
		}
		var e SeedEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// checkRequestEvents checks one request's events against its line.
func checkRequestEvents(q *SeedRequest, evs []SeedEvent) error {
	if len(evs) < 2 || evs[0].Event != EventPlanned || evs[0].MonoNS != q.PlannedMonoNS {
		return fmt.Errorf("%d events, the first not its planned send", len(evs))
	}
	last := evs[len(evs)-1]
	if last.Event != EventTerminal || last.Status != q.Status || q.EndMonoNS != 0 && last.MonoNS != q.EndMonoNS {
		return fmt.Errorf("the last event is %s %s at %d, not its terminal (%s at %d)", last.Event, last.Status, last.MonoNS, q.Status, q.EndMonoNS)
	}
	sentSeen := false
	for i, e := range evs {
		switch {
		case e.Schema != SeedEventSchema || e.RequestID != q.RequestID || e.RunID != q.RunID:
			return fmt.Errorf("event %d is of %s/%s, schema %q", i, e.RunID, e.RequestID, e.Schema)
		case i > 0 && e.MonoNS < evs[i-1].MonoNS:
			return fmt.Errorf("event %d (%s) comes before event %d in time", i, e.Event, i-1)
		case i < len(evs)-1 && (e.Event == EventTerminal || e.Status != StatusOK):
			return fmt.Errorf("event %d (%s, %s) before the terminal", i, e.Event, e.Status)
		}
		switch e.Event {
		case EventSent:
			if !q.Sent || sentSeen || e.MonoNS != q.SentMonoNS {
				return fmt.Errorf("a sent event at %d, the line says sent %v at %d", e.MonoNS, q.Sent, q.SentMonoNS)
			}
			sentSeen = true
		case EventFirstToken, EventOutputChunk:
			if !sentSeen {
				return fmt.Errorf("output (%s) before its send", e.Event)
			}
		}
	}
	if sentSeen != q.Sent {
		return fmt.Errorf("sent %v without a sent event", q.Sent)
	}
	return nil
}

// readSeedLines decodes every line of a JSON-lines file.
func readSeedLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, MaxLineBytes)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
