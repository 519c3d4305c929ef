package campaigndir

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testtree"
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
			other := miniProtocol(t, edit[0], edit[1])
			if p, err := protocols.PlanFile(other, protocols.Options{}); err != nil || p.Protocol.SHA256 == cp.ProtocolSHA256 {
				t.Fatalf("the edited protocol: %v; want another sha256", err)
			}
			before := testtree.Snapshot(t, dir)
			_, err := Create(other, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
			want := dir + " holds another campaign (" + cp.ID + ", protocol mini sha256 " + cp.ProtocolSHA256 + "); choose another directory"
			if err == nil || err.Error() != want {
				t.Fatalf("Create: %v\nwant %s", err, want)
			}
			if after := testtree.Snapshot(t, dir); !maps.EqualFunc(before, after, bytes.Equal) {
				t.Fatal("the refused start changed the campaign directory")
			}
		})
	}
}

// TestFailedCreateRemovesWhatItMade: a start that fails once it made the
// directory (here the fake GPUs cannot be set up: gpus.json is a
// dangling link) removes the directories it created, parents too, and
// leaves a directory that existed empty existing and empty.
func TestFailedCreateRemovesWhatItMade(t *testing.T) {
	proto := miniProtocol(t)
	for _, existed := range []bool{false, true} {
		t.Run(map[bool]string{false: "new", true: "existed"}[existed], func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "new", "camp")
			if existed {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			gpus := t.TempDir()
			if err := os.Symlink(filepath.Join(gpus, "nowhere"), filepath.Join(gpus, "gpus.json")); err != nil {
				t.Fatal(err)
			}
			_, err := Create(proto, dir, StartOptions{Backend: "fake", FakeGPUDir: gpus, Cgroups: "off"}, time.Now())
			if err == nil || !strings.HasPrefix(err.Error(), "fake GPUs: ") {
				t.Fatalf("Create with a broken fake GPU directory: %v", err)
			}
			if existed {
				if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
					t.Fatalf("%s holds %v after the failed start (%v); want it there and empty", dir, ents, err)
				}
			} else if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
				t.Fatalf("%s holds %v after the failed start (%v); want nothing", root, ents, err)
			}
			if _, err := os.Lstat(filepath.Join(gpus, "gpus.json")); errors.Is(err, os.ErrNotExist) {
				t.Fatal("the failed start removed the fake GPU directory's gpus.json")
			}
		})
	}
}
