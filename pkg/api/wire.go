package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"warden/pkg/state"
)

// One name per thing across the documents (schema 2): a run's id is "run"
// wherever it appears (ctlq runs, show and events, and the status's live
// attempts and awaiting runs), and a figure's unit is in its name (an
// event's monotonic time is "mono_ns"). The records keep their own names
// in the state database (state.Run's "id", state.Attempt's "run_id",
// state.Event's "mono"): the documents rename them, keeping every other
// key and the order of the keys.

// renameKeys renames the top-level keys of the JSON object b as names
// maps them, keeping the order of the keys and the values as they are.
func renameKeys(b []byte, names map[string]string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("rename keys: not a JSON object: %.40q", b)
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for i := 0; dec.More(); i++ {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if n, ok := names[key]; ok {
			key = n
		}
		k, _ := json.Marshal(key)
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(k)
		out.WriteByte(':')
		out.Write(v)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// marshalRenamed is v as JSON with its top-level keys renamed.
func marshalRenamed(v any, names map[string]string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return renameKeys(b, names)
}

// unmarshalRenamed decodes b into v once its top-level keys are renamed
// back.
func unmarshalRenamed(b []byte, v any, names map[string]string) error {
	back := make(map[string]string, len(names))
	for k, n := range names {
		back[n] = k
	}
	raw, err := renameKeys(b, back)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

var (
	runNames     = map[string]string{"id": "run"}
	attemptNames = map[string]string{"run_id": "run"}
	eventNames   = map[string]string{"mono": "mono_ns"}
)

// wireRun, wireAttempt and wireEvent are the records as the documents
// name their keys.
type (
	wireRun     struct{ state.Run }
	wireAttempt struct{ state.Attempt }
	wireEvent   struct{ state.Event }
)

func (w wireRun) MarshalJSON() ([]byte, error)     { return marshalRenamed(w.Run, runNames) }
func (w *wireRun) UnmarshalJSON(b []byte) error    { return unmarshalRenamed(b, &w.Run, runNames) }
func (w wireAttempt) MarshalJSON() ([]byte, error) { return marshalRenamed(w.Attempt, attemptNames) }
func (w *wireAttempt) UnmarshalJSON(b []byte) error {
	return unmarshalRenamed(b, &w.Attempt, attemptNames)
}
func (w wireEvent) MarshalJSON() ([]byte, error)  { return marshalRenamed(w.Event, eventNames) }
func (w *wireEvent) UnmarshalJSON(b []byte) error { return unmarshalRenamed(b, &w.Event, eventNames) }

func wireEvents(evs []state.Event) []wireEvent {
	out := make([]wireEvent, len(evs))
	for i, e := range evs {
		out[i] = wireEvent{e}
	}
	return out
}

func stateEvents(ws []wireEvent) []state.Event {
	if ws == nil {
		return nil
	}
	out := make([]state.Event, len(ws))
	for i, w := range ws {
		out[i] = w.Event
	}
	return out
}

// runDetailWire is RunDetail's document: the run's id as "run", its
// record beside it as "record".
type runDetailWire struct {
	Schema          int                 `json:"schema"`
	GPUBackend      string              `json:"gpu_backend"`
	FakeGPUs        bool                `json:"fake_gpus"`
	Run             string              `json:"run"`
	Record          wireRun             `json:"record"`
	State           string              `json:"state"`
	Attempts        []wireAttempt       `json:"attempts"`
	Events          []wireEvent         `json:"events"`
	Gates           []state.GateVerdict `json:"gates"`
	DamagedEvidence *[]EvidenceDamage   `json:"damaged_evidence,omitempty"`
}

// MarshalJSON writes the run's document (runDetailWire).
func (d RunDetail) MarshalJSON() ([]byte, error) {
	w := runDetailWire{Schema: d.Schema, GPUBackend: d.GPUBackend, FakeGPUs: d.FakeGPUs, Run: d.Run.ID, Record: wireRun{d.Run},
		State: d.State, Events: wireEvents(d.Events), Gates: d.Gates, DamagedEvidence: d.DamagedEvidence}
	if d.Attempts != nil {
		w.Attempts = make([]wireAttempt, len(d.Attempts))
		for i, a := range d.Attempts {
			w.Attempts[i] = wireAttempt{a}
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the run's document (runDetailWire).
func (d *RunDetail) UnmarshalJSON(b []byte) error {
	var w runDetailWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*d = RunDetail{Schema: w.Schema, GPUBackend: w.GPUBackend, FakeGPUs: w.FakeGPUs, Run: w.Record.Run, State: w.State,
		Events: stateEvents(w.Events), Gates: w.Gates, DamagedEvidence: w.DamagedEvidence}
	if w.Attempts != nil {
		d.Attempts = make([]state.Attempt, len(w.Attempts))
		for i, a := range w.Attempts {
			d.Attempts[i] = a.Attempt
		}
	}
	return nil
}

// eventsWire is the answer of GET /v1/events as it is written.
type eventsWire struct {
	Schema int         `json:"schema"`
	Events []wireEvent `json:"events"`
}

// MarshalJSON writes the page with each event's keys as the documents
// name them.
func (e Events) MarshalJSON() ([]byte, error) {
	return json.Marshal(eventsWire{Schema: e.Schema, Events: wireEvents(e.Events)})
}

// UnmarshalJSON reads a page MarshalJSON wrote.
func (e *Events) UnmarshalJSON(b []byte) error {
	var w eventsWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Schema, e.Events = w.Schema, stateEvents(w.Events)
	return nil
}

// MarshalJSON writes the line: "schema" first, then the event's keys as
// the documents name them.
func (l EventLine) MarshalJSON() ([]byte, error) {
	ev, err := wireEvent{l.Event}.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if len(ev) <= 2 { // {}
		return []byte(fmt.Sprintf(`{"schema":%d}`, l.Schema)), nil
	}
	return append([]byte(fmt.Sprintf(`{"schema":%d,`, l.Schema)), ev[1:]...), nil
}

// UnmarshalJSON reads a line MarshalJSON wrote.
func (l *EventLine) UnmarshalJSON(b []byte) error {
	var s struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	var w wireEvent
	if err := w.UnmarshalJSON(b); err != nil {
		return err
	}
	l.Schema, l.Event = s.Schema, w.Event
	return nil
}
