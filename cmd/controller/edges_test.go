package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warden/bench/crashcheck"
	"warden/internal/testutil/testcampaign"
	"warden/internal/testutil/testtmpfs"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// Bad input at the edges: a full disk, an unwritable directory, inputs
// deleted or changed under a running campaign, two resumes at once.

// runOnTmpfs runs a campaign of patterns runs in the foreground, its
// directory on a new tmpfs (testtmpfs.Mount with size), each saturation client
// running the shell command fill before it measures; it returns the
// campaign and the tmpfs.
func runOnTmpfs(t *testing.T, size string, patterns int, fill string) (*campaign, string) {
	t.Helper()
	fs := testtmpfs.Mount(t, size)
	c := newCampaign(t)
	c.dir = filepath.Join(fs, "camp")
	proto := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: patterns}), defaultClient,
		`client: {shell: '`+fill+`; exec ${STANDIN} client --warmup-s 0.2 --measure-s 0.5 --drain-s 2 --concurrency 2 --result-dir "$WARDEN_ATTEMPT_DIR/client"'}`)
	out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	return c, fs
}

func TestFullDisk(t *testing.T) {
	t.Parallel()
	// the first attempt's client fills the file system, then measures
	c, fs := runOnTmpfs(t, "24m", 2, `if [ "$WARDEN_RUN_ID" = p1.saturation ] && [ "$WARDEN_ATTEMPT" = 1 ]; then head -c 100M /dev/zero > "$WARDEN_ATTEMPT_DIR/filler"; fi`)
	var st syscall.Statfs_t
	if err := syscall.Statfs(fs, &st); err != nil || st.Bavail != 0 {
		t.Fatalf("test bug: the file system was not filled (%d blocks free, %v)", st.Bavail, err)
	}
	s := c.store() // the invariants hold
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonHarnessError) ||
		!strings.Contains(cp.StopDetail, "no space left on device") || !strings.Contains(cp.StopDetail, c.dir) {
		t.Fatalf("campaign %s (%s: %s); want stopped for the full campaign directory", cp.State, cp.StopReason, cp.StopDetail)
	}
	s.Close()
	c.assertNoProcesses()

	if err := os.Remove(filepath.Join(c.dir, "runs", "p1.saturation", "a1", "filler")); err != nil {
		t.Fatal(err)
	}
	out, code := c.controller("resume", "-d", c.dir, "--foreground")
	if code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	// complete, one result per run, every state.json matching the
	// database, nothing left running or holding GPU memory
	requireFinal(t, c)
}

// killedMidCampaign starts a campaign detached and kills its controller
// while a run measures; the server and client live on.
func killedMidCampaign(t *testing.T, sc scenario) (*campaign, string) {
	t.Helper()
	c := newCampaign(t)
	proto := writeProtocol(t, sc)
	c.startDetached(proto, "auto")
	c.waitMeasuring()
	c.killController()
	return c, proto
}

// Two resumes started at once: one runs the campaign, the other is
// refused, naming the winner's pid.
func TestRacingResumes(t *testing.T) {
	t.Parallel()
	c, _ := killedMidCampaign(t, scenario{patterns: 2, measureS: "2"})
	type result struct {
		out  string
		code int
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(controllerBin, "--resume", "-d", c.dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				out = append(out, err.Error()...)
			}
			results <- result{string(out), cmd.ProcessState.ExitCode()}
		}()
	}
	wg.Wait()
	close(results)
	var won, lost []result
	for r := range results {
		if r.code == 0 {
			won = append(won, r)
		} else {
			lost = append(lost, r)
		}
	}
	if len(won) != 1 || len(lost) != 1 {
		t.Fatalf("want one resume to win and one to be refused, got %d and %d: %+v", len(won), len(lost), append(won, lost...))
	}
	m := regexp.MustCompile(`controller running, pid (\d+)`).FindStringSubmatch(won[0].out)
	if m == nil {
		t.Fatalf("winner said: %s", won[0].out)
	}
	if want := "refused: controller pid " + m[1] + " already runs campaign " + c.dir; !strings.Contains(lost[0].out, want) {
		t.Fatalf("loser said %q; want %q", lost[0].out, want)
	}
	c.waitExit()
	requireFinal(t, c)
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// requireFinal checks the end state of a campaign that the test's last
// resume completed.
func requireFinal(t *testing.T, c *campaign) {
	t.Helper()
	vs, err := crashcheck.Final(c.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// The protocol file deleted under a running campaign: the controller
// runs on from its plan.json; resume is refused, naming the missing file,
// its recorded hash and the copy kept; with the file restored it resumes.
func TestProtocolDeletedMidCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// one run at a time: the third starts only once the first two have
	// ended, however long their servers take to stop
	proto := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 3, measureS: "1.5"}),
		"{name: two, concurrency: 2}", "{name: two, concurrency: 1}")
	sum := sha256File(t, proto)
	c.startDetached(proto, "auto")
	c.waitMeasuring()
	if err := os.Remove(proto); err != nil {
		t.Fatal(err)
	}
	// the third run starts after the deletion
	waitFor(t, "the third run measuring, alone", 120*time.Second, func() bool {
		cur := c.liveStatus().Current
		return len(cur) == 1 && cur[0].Run == "p3.saturation" && cur[0].State == string(state.Measuring)
	})
	c.killController()

	out, code := c.controller("resume", "-d", c.dir, "--foreground")
	for _, want := range []string{"refused: a recorded input changed", proto + " is missing (recorded sha256 " + sum + ")", filepath.Join(c.dir, "provenance", "files")} {
		if code == 0 || !strings.Contains(out, want) {
			t.Fatalf("resume without the protocol: exit %d, output lacks %q:\n%s", code, want, tail(out, 2000))
		}
	}
	s := c.store()
	if live, _ := s.LiveAttempts(); len(live) != 1 || live[0].RunID != "p3.saturation" {
		t.Fatalf("the refused resume changed the records: live attempts %+v", live)
	}
	s.Close()

	// restore it from the campaign's copy
	copies, _ := filepath.Glob(filepath.Join(c.dir, "provenance", "files", "*"))
	restored := false
	for _, f := range copies {
		if sha256File(t, f) == sum {
			b, _ := os.ReadFile(f)
			restored = os.WriteFile(proto, b, 0o644) == nil
		}
	}
	if !restored {
		t.Fatalf("no copy of the protocol among %v", copies)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	requireFinal(t, c)
}

// A provenance file changed under a running campaign: resume is refused,
// naming the file and both hashes, and changes nothing.
func TestProvenanceChangedMidCampaign(t *testing.T) {
	t.Parallel()
	c, proto := killedMidCampaign(t, scenario{patterns: 2, measureS: "2"})
	orig, err := os.ReadFile(proto)
	if err != nil {
		t.Fatal(err)
	}
	before := sha256File(t, proto)
	if err := os.WriteFile(proto, append(orig, "# edited after the start\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	after := sha256File(t, proto)
	want := proto + " changed: recorded sha256 " + before + ", now " + after
	for _, args := range [][]string{{"resume", "-d", c.dir, "--foreground"}, {"--resume", "-d", c.dir}} {
		out, code := c.controller(args...)
		if code == 0 || !strings.Contains(out, "refused: a recorded input changed") || !strings.Contains(out, want) {
			t.Fatalf("controller %v: exit %d; want a refusal naming %q:\n%s", args, code, want, tail(out, 2000))
		}
	}
	s := c.store()
	if live, _ := s.LiveAttempts(); len(live) != 2 {
		t.Fatalf("the refused resumes changed the records: live attempts %+v", live)
	}
	s.Close()
	if err := os.WriteFile(proto, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	requireFinal(t, c)
}

// A campaign directory that became read-only: start and resume say so
// and change nothing; once writable again, resume completes.
func TestUnwritableCampaignDir(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("a read-only bind mount needs root (root ignores directory modes)")
	}
	c, proto := killedMidCampaign(t, scenario{patterns: 2, measureS: "2"})
	if out, err := exec.Command("mount", "--bind", c.dir, c.dir).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount: %v %s", err, out)
	}
	mounted := true
	unmount := func() {
		if mounted {
			if out, err := exec.Command("umount", "-l", c.dir).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v %s", c.dir, err, out)
			}
			mounted = false
		}
	}
	t.Cleanup(unmount)
	if out, err := exec.Command("mount", "-o", "remount,ro,bind", c.dir).CombinedOutput(); err != nil {
		t.Skipf("cannot remount read-only: %v %s", err, out)
	}
	db := sha256File(t, dirlayout.State(c.dir))
	for _, args := range [][]string{{"resume", "-d", c.dir, "--foreground"}, {"--resume", "-d", c.dir}} {
		out, code := c.controller(args...)
		if code == 0 || !strings.Contains(out, c.dir) || !strings.Contains(out, "read-only file system") {
			t.Fatalf("controller %v on a read-only directory: exit %d:\n%s", args, code, tail(out, 2000))
		}
		t.Logf("controller %v: %s", args, strings.TrimSpace(out))
	}
	out, code := c.controller("start", "-f", proto, "-d", filepath.Join(c.dir, "another"), "--gpu-backend", "fake")
	if code == 0 || !strings.Contains(out, "read-only file system") {
		t.Fatalf("start in a read-only directory: exit %d:\n%s", code, out)
	}
	t.Logf("controller start: %s", strings.TrimSpace(out))
	if got := sha256File(t, dirlayout.State(c.dir)); got != db {
		t.Fatal("state.db changed on a read-only file system")
	}
	unmount()
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	requireFinal(t, c)
}
