package campaigndir

import (
	"os"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
	"warden/protocols"
)

// storedCampaign reads the campaign the database in dir holds.
func storedCampaign(t *testing.T, dir string) state.Campaign {
	t.Helper()
	st, err := state.OpenReadOnly(dirlayout.State(dir), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp, err := st.Campaign()
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestCheckBelongsRefusesAnotherCampaignsDatabase: resume proves that
// the state database is the directory's own. A database copied in from
// another campaign, or one whose campaign id, protocol hash or protocol
// file disagree with controller.json, plan.json or provenance, is
// refused, naming what disagrees and the campaign the database holds,
// with the directory it was created in; a campaign from before
// controller.json recorded its id is checked by that directory.
func TestCheckBelongsRefusesAnotherCampaignsDatabase(t *testing.T) {
	dir, proto := created(t)
	other, _ := created(t)
	set, err := ReadSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := dirlayout.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	own, theirs := storedCampaign(t, dir), storedCampaign(t, other)
	if own.ID == theirs.ID || own.ID != set.CampaignID {
		t.Fatalf("campaigns %s and %s, settings %s: not the fixture meant", own.ID, theirs.ID, set.CampaignID)
	}
	sha := plan.Protocol.SHA256
	bad := strings.Repeat("0", 64)
	refused := func(what, here, db string, cp state.Campaign) string {
		return "refused: " + dir + " holds another campaign's database: " + what + " is " + here + " here but " + db +
			" in state.db (campaign " + cp.ID + ", created in " + cp.Dir + ")"
	}
	for _, tc := range []struct {
		name string
		edit func(*Settings, *protocols.Plan, *state.Campaign)
		want func(cp state.Campaign) string // nil: it belongs
	}{
		{name: "its own", edit: func(*Settings, *protocols.Plan, *state.Campaign) {}},
		{name: "another campaign's database copied in", edit: func(_ *Settings, _ *protocols.Plan, cp *state.Campaign) {
			b, err := os.ReadFile(dirlayout.State(other))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dirlayout.State(dir), b, 0o600); err != nil {
				t.Fatal(err)
			}
			*cp = storedCampaign(t, dir)
		}, want: func(cp state.Campaign) string {
			if cp.Dir != other {
				t.Fatalf("the copied database's campaign was created in %s, want %s", cp.Dir, other)
			}
			return refused("the campaign id", own.ID+" (controller.json)", theirs.ID, cp)
		}},
		{name: "the settings' protocol sha256", edit: func(s *Settings, _ *protocols.Plan, _ *state.Campaign) { s.ProtocolSHA256 = bad },
			want: func(cp state.Campaign) string {
				return refused("the protocol sha256", bad+" (controller.json)", sha, cp)
			}},
		{name: "the plan's protocol sha256", edit: func(_ *Settings, p *protocols.Plan, _ *state.Campaign) { p.Protocol.SHA256 = bad },
			want: func(cp state.Campaign) string { return refused("the protocol sha256", bad+" (plan.json)", sha, cp) }},
		{name: "settings without the campaign, the database made elsewhere", edit: func(s *Settings, _ *protocols.Plan, cp *state.Campaign) {
			s.CampaignID, s.ProtocolSHA256 = "", ""
			cp.Dir = other
		}, want: func(cp state.Campaign) string { return refused("the campaign directory", dir, other, cp) }},
		{name: "settings without the campaign, the database made here", edit: func(s *Settings, _ *protocols.Plan, cp *state.Campaign) {
			s.CampaignID, s.ProtocolSHA256 = "", ""
			cp.Dir = dir + "/"
		}},
		{name: "the database made elsewhere, settings naming its campaign", edit: func(_ *Settings, _ *protocols.Plan, cp *state.Campaign) {
			cp.Dir = other
		}},
		{name: "another protocol file", edit: func(_ *Settings, _ *protocols.Plan, cp *state.Campaign) { cp.ProtocolPath = proto + ".other" },
			want: func(cp state.Campaign) string {
				return refused("the protocol file", proto+" (provenance)", proto+".other", cp)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clean, err := os.ReadFile(dirlayout.State(dir))
			if err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(dirlayout.State(dir), clean, 0o600)
			s, p, cp := set, *plan, own
			tc.edit(&s, &p, &cp)
			err = CheckBelongs(dir, s, &p, cp)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused its own database: %v", err)
			case tc.want != nil && (err == nil || err.Error() != tc.want(cp)):
				t.Fatalf("CheckBelongs: %v\nwant %s", err, tc.want(cp))
			}
		})
	}
	if err := CheckBelongs(t.TempDir(), set, plan, own); err == nil || !strings.Contains(err.Error(), "provenance") {
		t.Fatalf("a directory without provenance: %v", err)
	}
}
