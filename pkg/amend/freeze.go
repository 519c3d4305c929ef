package amend

import (
	"fmt"
	"io"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/state"
)

// FreezeAmendment is the record of a freeze (controller freeze): it ends
// scheduling under the protocol the campaign runs, whose hash it keeps.
func FreezeAmendment(id, reason string, uid int, protocolSHA256 string, now time.Time) state.Amendment {
	return state.Amendment{ID: id, Date: now.UTC().Format("2006-01-02"), Title: reason, Text: reason,
		OperatorUID: uid, OldSHA256: protocolSHA256, ProtocolSHA256: protocolSHA256}
}

// Frozen is the outcome of a freeze, as -o json prints it (its keys in
// alphabetical order).
type Frozen struct {
	Amendment string   `json:"amendment"`
	NotRun    []string `json:"not_run"`
	Schema    int      `json:"schema"`
	State     string   `json:"state"`
}

// WriteText writes the outcome for a person.
func (f Frozen) WriteText(w io.Writer) {
	fmt.Fprintf(w, "campaign frozen by %s; %d runs not run: %v\n", f.Amendment, len(f.NotRun), f.NotRun)
}

func frozen(id string, notRun []string) Frozen {
	return Frozen{Amendment: id, NotRun: notRun, Schema: Schema, State: string(state.CampaignFrozen)}
}

// Freeze freezes the campaign in dir, which no controller runs, by the
// amendment id: every run without a result becomes not-run.
func Freeze(dir, id, reason string, uid int, now time.Time) (Frozen, error) {
	store, err := dirlayout.OpenStore(dir, state.Options{Timeout: 2 * time.Second})
	if err != nil {
		return Frozen{}, err
	}
	defer store.Close()
	cp, err := store.Campaign()
	if err != nil {
		return Frozen{}, err
	}
	notRun, err := store.Freeze(FreezeAmendment(id, reason, uid, cp.ProtocolSHA256, now))
	if err != nil {
		return Frozen{}, fmt.Errorf("freeze %s: %w", dir, err)
	}
	failpoint.Hit("freeze-recorded")
	return frozen(id, notRun), nil
}

// ReadFrozen reads the outcome of a freeze by the amendment id that a
// controller carried out in dir and exited: an error when it did not
// freeze the campaign.
func ReadFrozen(dir, id string) (Frozen, error) {
	st, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return Frozen{}, err
	}
	defer st.Close()
	cp, err := st.Campaign()
	if err != nil {
		return Frozen{}, err
	}
	if cp.State != state.CampaignFrozen {
		return Frozen{}, fmt.Errorf("the controller exited without freezing the campaign (it is %s); see %s", cp.State, dirlayout.Log(dir))
	}
	runs, err := st.Runs()
	if err != nil {
		return Frozen{}, err
	}
	var notRun []string
	for _, r := range runs {
		if r.NotRun == id {
			notRun = append(notRun, r.ID)
		}
	}
	return frozen(id, notRun), nil
}

// CheckRecorded refuses an amendment id that no recorded amendment of the
// protocol has: readjudicate applies the rules of one of those only.
func CheckRecorded(store *state.Store, id string) error {
	as, err := store.Amendments()
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.ID == id && (a.Kind == "amend" || a.Kind == "") {
			return nil
		}
	}
	return fmt.Errorf("readjudicate: no amendment %s of the protocol is recorded", id)
}
