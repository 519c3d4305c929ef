package campaigndir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/amend"
	"warden/protocols"
)

// TestAmendableSavesSettings: an installed amendment's protocol path and
// hash go to controller.json; the other settings stay as they were.
func TestAmendableSavesSettings(t *testing.T) {
	dir := t.TempDir()
	set := Settings{Schema: 1, CampaignID: "c1", ProtocolSHA256: "old", ProtocolPath: "/p/old.yaml", Workdir: "/w", GPUBackend: "fake", Cgroups: "off"}
	c := Amendable(dir, set, nil)
	if c.Dir != dir || c.Workdir != "/w" {
		t.Fatalf("campaign %+v", c)
	}
	if err := c.SaveSettings("/p/new.yaml", "new"); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := set
	want.ProtocolPath, want.ProtocolSHA256 = "/p/new.yaml", "new"
	if got != want {
		t.Errorf("settings %+v, want %+v", got, want)
	}
}

// amended writes the campaign's protocol with the moderate load's
// expected seconds changed, beside the original.
func amended(t *testing.T, proto string) string {
	t.Helper()
	b, err := os.ReadFile(proto)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "    kind: moderate\n    needs: [sat]\n    expected_s: 10", "    kind: moderate\n    needs: [sat]\n    expected_s: 12", 1)
	if s == string(b) {
		t.Fatal("the mini protocol changed; the amendment does not apply")
	}
	p := filepath.Join(filepath.Dir(proto), "mini-2.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAmend: without Yes only the diff; with it the amendment is recorded
// and controller.json follows it. A directory that is no campaign's is a
// *SettingsError; an invalid protocol, the protocol's problems.
func TestAmend(t *testing.T) {
	dir, proto := created(t)
	next := amended(t, proto)
	req := amend.Request{Protocol: next, ID: "A-1", Reason: "longer moderate runs", UID: os.Getuid()}
	res, err := Amend(dir, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Recorded || len(res.Diff.Changed) != 2 {
		t.Fatalf("shown: %+v", res)
	}
	if set, _ := ReadSettings(dir); set.ProtocolPath != proto {
		t.Fatalf("a shown amendment changed the settings: %+v", set)
	}
	req.Yes = true
	if res, err = Amend(dir, req); err != nil || !res.Recorded {
		t.Fatalf("recorded: %+v, %v", res, err)
	}
	if set, _ := ReadSettings(dir); set.ProtocolPath != next || set.ProtocolSHA256 != res.Diff.After {
		t.Fatalf("settings after the amendment: %+v", set)
	}

	var se *SettingsError
	if _, err := Amend(t.TempDir(), req); !errors.As(err, &se) || !strings.Contains(err.Error(), "is not a campaign directory") {
		t.Fatalf("no campaign: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("warden: 1\nname: [\n"), 0o644)
	var ps *protocols.Problems
	if _, err := Amend(dir, amend.Request{Protocol: bad, ID: "A-2", Reason: "x"}); !errors.As(err, &ps) {
		t.Fatalf("an invalid protocol: %v", err)
	}
}

// TestReadjudicate: only a recorded amendment of the protocol applies;
// under one, a campaign with no recorded attempt changes no verdict.
func TestReadjudicate(t *testing.T) {
	dir, proto := created(t)
	if _, err := Readjudicate(dir, "A-1", nil); err == nil || err.Error() != "readjudicate: no amendment A-1 of the protocol is recorded" {
		t.Fatalf("no amendment: %v", err)
	}
	if _, err := Amend(dir, amend.Request{Protocol: amended(t, proto), ID: "A-1", Reason: "longer", Yes: true}); err != nil {
		t.Fatal(err)
	}
	changes, err := Readjudicate(dir, "A-1", nil)
	if err != nil || len(changes) != 0 {
		t.Fatalf("Readjudicate = %+v, %v", changes, err)
	}
	if err := os.Remove(filepath.Join(dir, SettingsFile)); err != nil {
		t.Fatal(err)
	}
	var se *SettingsError
	if _, err := Readjudicate(dir, "A-1", nil); !errors.As(err, &se) {
		t.Fatalf("no settings: %v", err)
	}
}
