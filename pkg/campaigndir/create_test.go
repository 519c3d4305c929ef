package campaigndir

import (
	"bytes"
	"maps"
	"testing"
	"time"

	"warden/protocols"
)

// TestCreateRefusesAnotherProtocolsCampaign: start in a directory that
// holds a campaign of another protocol (another name, or the same name
// with other content) is refused, naming that campaign, its protocol and
// hash, and changes nothing there.
func TestCreateRefusesAnotherProtocolsCampaign(t *testing.T) {
	dir, _ := created(t)
	cp := storedCampaign(t, dir)
	for name, edit := range map[string][2]string{
		"another name":    {"name: mini", "name: other"},
		"another content": {"expected_s: 10", "expected_s: 11"},
	} {
		t.Run(name, func(t *testing.T) {
			other := miniProtocol(t, func(b []byte) []byte { return bytes.Replace(b, []byte(edit[0]), []byte(edit[1]), 1) })
			if p, err := protocols.PlanFile(other, protocols.Options{}); err != nil || p.Protocol.SHA256 == cp.ProtocolSHA256 {
				t.Fatalf("the edited protocol: %v; want another sha256", err)
			}
			before := snapshot(t, dir)
			_, err := Create(other, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
			want := dir + " holds another campaign (" + cp.ID + ", protocol mini sha256 " + cp.ProtocolSHA256 + "); choose another directory"
			if err == nil || err.Error() != want {
				t.Fatalf("Create: %v\nwant %s", err, want)
			}
			if after := snapshot(t, dir); !maps.EqualFunc(before, after, bytes.Equal) {
				t.Fatal("the refused start changed the campaign directory")
			}
		})
	}
}
