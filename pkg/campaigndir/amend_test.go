package campaigndir

import (
	"testing"
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
