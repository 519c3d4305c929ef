package campaigndir

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
	"warden/pkg/state"
)

// miniProtocol writes the mini protocol (testcampaign.Mini), with its cap
// raised and then edits' old, new pairs replaced, and returns its path.
func miniProtocol(t *testing.T, edits ...string) string {
	t.Helper()
	// its two runs launch at once and reserve 0.622 GPU-hours each at
	// their bounds: a cap of 1.0 would refuse the first wave, and start
	// with it
	return testcampaign.Mini(t, append([]string{"cap_gpu_hours: 1.0", "cap_gpu_hours: 2.0"}, edits...)...)
}

// created makes a campaign of the mini protocol (miniProtocol); it
// returns the campaign directory and the protocol's path.
func created(t *testing.T) (string, string) {
	t.Helper()
	proto := miniProtocol(t)
	dir := filepath.Join(t.TempDir(), "campaign")
	if _, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return dir, proto
}

// TestLock: one controller at a time; a directory without a database is
// no campaign; a group-readable campaign becomes owner-only.
func TestLock(t *testing.T) {
	if _, err := Lock(t.TempDir()); err == nil || !strings.Contains(err.Error(), "is not a campaign directory: no "+dirlayout.StateFile) {
		t.Fatalf("an empty directory: %v", err)
	}
	dir, _ := created(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("campaign directory mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	if _, err := Lock(dir); err == nil || err.Error() != "refused: controller pid "+strconv.Itoa(os.Getpid())+" already runs campaign "+dir {
		t.Fatalf("a second lock: %v", err)
	}
	lock.Release()
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Release()
}

// TestOpen: the campaign opens with its settings, plan and store; another
// GPU backend is refused; so is a recorded input that changed, with the
// copy to restore a missing one from.
func TestOpen(t *testing.T) {
	dir, proto := created(t)
	o, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := o.Store.Campaign()
	if err != nil {
		t.Fatal(err)
	}
	if o.Settings.GPUBackend != "fake" || o.Plan.Protocol.Name != "mini" || cp.ID != o.Settings.CampaignID {
		t.Fatalf("opened %+v, campaign %s", o.Settings, cp.ID)
	}
	o.Store.Close()
	if _, err := Open(dir, "nvml"); err == nil || err.Error() != `campaign uses GPU backend "fake"; --gpu-backend nvml cannot change it` {
		t.Fatalf("another backend: %v", err)
	}
	if err := os.Remove(proto); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, "fake")
	ents, _ := provenance.Read(dir)
	copyPath, _ := provenance.CopyOf(dir, ents[0])
	if err == nil || !strings.HasPrefix(err.Error(), "refused: a recorded input changed") || !strings.Contains(err.Error(), "restore "+proto+" from its copy "+copyPath) {
		t.Fatalf("a missing protocol: %v", err)
	}
	// the refusal closed the store: another writer opens it at once
	st, err := state.Open(dirlayout.State(dir), state.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("the store is still held after the refusal: %v", err)
	}
	st.Close()
	b, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(proto, b, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err = Open(dir, "fake")
	if err != nil {
		t.Fatalf("restored: %v", err)
	}
	o.Store.Close()
}

// Start refuses a provenance file whose hash is not the one the protocol
// freezes, naming the field's file, line and column and both hashes, and
// creates nothing.
func TestStartRefusesFrozenHash(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "protocols", "testdata", "mini.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pdir, "source.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	frozen := strings.Repeat("0", 64)
	b = bytes.Replace(b, []byte("slots:\n"), []byte("provenance:\n  - {path: source.jsonl, role: source, sha256: "+frozen+"}\nslots:\n"), 1)
	b = bytes.Replace(b, []byte("cap_gpu_hours: 1.0"), []byte("cap_gpu_hours: 2.0"), 1)
	proto := filepath.Join(pdir, "mini.yaml")
	if err := os.WriteFile(proto, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "campaign")
	_, err = Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
	const now = "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356" // sha256 of "{}\n"
	if err == nil || !strings.Contains(err.Error(), proto+":6:48: provenance[0].sha256: source.jsonl has sha256 "+now+"; the protocol freezes "+frozen) {
		t.Fatalf("start with another file: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused start created %s: %v", dir, err)
	}
}

// Start records every seed the protocol names in DIR/provenance/seeds.json
// (seed 002: "all raw analysis seeds"), with the protocol's hash.
func TestStartRecordsSeeds(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "protocols", "testdata", "mini.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("cap_gpu_hours: 1.0"), []byte("cap_gpu_hours: 2.0"), 1)
	b = bytes.Replace(b, []byte("slots:\n"), []byte("seeds: {workload: 20260712, execution_order: 20260713, bootstrap_permutation: 20260714}\nslots:\n"), 1)
	proto := filepath.Join(t.TempDir(), "mini.yaml")
	if err := os.WriteFile(proto, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "campaign")
	plan, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, provenance.SubDir, provenance.SeedsFile))
	if err != nil {
		t.Fatal(err)
	}
	var s provenance.Seeds
	if err := json.Unmarshal(raw, &s); err != nil || s.Schema != provenance.SeedsSchema || s.ProtocolSHA256 != plan.Protocol.SHA256 ||
		s.Seeds["workload"] != 20260712 || s.Seeds["execution_order"] != 20260713 || s.Seeds["bootstrap_permutation"] != 20260714 {
		t.Fatalf("seeds.json %s: %v", raw, err)
	}
}
