package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/bench/crashcheck"
	"warden/internal/testutil/testtmpfs"
	"warden/pkg/api"
	"warden/pkg/campaigndir"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/record"
	"warden/pkg/report"
	"warden/pkg/safefile"
	"warden/pkg/state"
)

// fillUp writes zeros to path until its file system is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return
		}
	}
}

// statusJSON is ctlq status -o json of the campaign, whatever its exit.
func (c *campaign) statusJSON() api.Status {
	c.t.Helper()
	out, _ := exec.Command(ctlqBin, "status", "-d", c.dir, "-o", "json").Output()
	var st api.Status
	if err := json.Unmarshal(out, &st); err != nil {
		c.t.Fatalf("ctlq status -o json: %v\n%s", err, out)
	}
	return st
}

// The campaign's file system fills up while a run measures. The controller
// ends the attempt's processes and stops; while it is down, ctlq status
// shows no GPU time in flight growing for processes that are gone. Space is
// freed and the campaign resumed: the attempt is charged no more than its
// processes ran (from its server's start to when the controller was seen
// gone, at the latest), not up to the resume; and never less than they
// ran (crashcheck.Final).
func TestFullDiskWhileMeasuringChargesWhatRan(t *testing.T) {
	t.Parallel()
	fs := testtmpfs.Mount(t, "64m")
	c := newCampaign(t)
	c.dir = filepath.Join(fs, "camp")
	c.start(writeProtocol(t, scenario{patterns: 1, measureS: "2"}), "--fake-gpus", filepath.Join(t.TempDir(), "gpus"))
	cur := c.waitMeasuring()
	filler := filepath.Join(fs, "filler")
	fillUp(t, filler)
	c.waitUnlocked("the controller to stop for the full disk", 120*time.Second)
	gone := time.Now() // the controller and, after it, nothing of the attempt ran past this
	waitFor(t, "the campaign's processes to end", 30*time.Second, func() bool { return len(c.campaignPIDs()) == 0 })

	first := c.statusJSON()
	if first.Campaign.State == string(state.CampaignComplete) {
		t.Fatalf("test bug: the campaign completed on a full disk")
	}
	waitFor(t, "time to pass with no controller", 30*time.Second, func() bool { return time.Since(gone) > 2*time.Second })
	second := c.statusJSON()
	if second.Budget.InFlightGPUHours > first.Budget.InFlightGPUHours {
		t.Errorf("GPU time in flight grew from %.9f to %.9f GPU-h with no process left",
			first.Budget.InFlightGPUHours, second.Budget.InFlightGPUHours)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	a := c.attempts(s, cur.Run)[cur.Attempt-1]
	srv := record.ServerProc(a)
	if srv == nil {
		t.Fatalf("attempt %s/%d recorded no server", cur.Run, cur.Attempt)
	}
	ledger, err := s.Ledger()
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	var charged float64
	for _, e := range ledger {
		if e.Kind == state.LedgerCharge && e.Run == cur.Run && e.Attempt == cur.Attempt {
			charged += e.GPUSeconds
		}
	}
	ran := gone.Sub(srv.StartedAt).Seconds() * float64(len(a.GPUIDs))
	t.Logf("attempt %s/%d: %s (%s); charged %.3f GPU-s, at most %.3f ran; in flight while down %.9f then %.9f GPU-h",
		cur.Run, cur.Attempt, a.State, a.Reason, charged, ran, first.Budget.InFlightGPUHours, second.Budget.InFlightGPUHours)
	if charged > ran {
		t.Errorf("charged %.3f GPU-s, but its processes ran at most %.3f GPU-s (server start to the controller's exit)", charged, ran)
	}
	vs, err := crashcheck.Final(c.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// tableRow is the report's table row of run, from ctlq report --table-json.
func (c *campaign) tableRow(run string) report.Row {
	c.t.Helper()
	tmp := c.t.TempDir()
	table := filepath.Join(tmp, "table.json")
	if out, err := exec.Command(ctlqBin, "report", "-d", c.dir, "-o", filepath.Join(tmp, "r.html"), "--table-json", table).CombinedOutput(); err != nil {
		c.t.Fatalf("ctlq report: %v\n%s", err, out)
	}
	b, err := os.ReadFile(table)
	if err != nil {
		c.t.Fatal(err)
	}
	var tb report.Table
	if err := json.Unmarshal(b, &tb); err != nil {
		c.t.Fatal(err)
	}
	for _, r := range tb.Rows {
		if r.Run == run {
			return r
		}
	}
	c.t.Fatalf("no row of %s in the report's table", run)
	return report.Row{}
}

// An attempt's evidence files are made durable and digested when its
// processes have ended; one that a failing disk left NUL-filled (here
// zeroed after the fact, as a remount after an I/O error shows it) is
// reported as damaged evidence with its path by ctlq show and ctlq report,
// and never read as valid: the report takes no figure from it.
func TestDamagedEvidenceIsReported(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{patterns: 1})
	a := c.soleAttempt(s, "p1.saturation", state.Complete)[0]
	s.Close()
	sealed := map[string]bool{}
	for _, e := range a.Evidence {
		sealed[e.Path] = e.Size > 0 && len(e.SHA256) == 64
	}
	for _, name := range []string{"client.out", "server.out", "environment.json", filepath.Join("client", "result.json")} {
		if !sealed[name] {
			t.Fatalf("no digest of %s recorded: %+v", name, a.Evidence)
		}
	}
	if r := c.tableRow("p1.saturation"); r.ThroughputRPS == nil || len(r.DamagedEvidence) != 0 {
		t.Fatalf("before any damage: throughput %v, damaged %v", r.ThroughputRPS, r.DamagedEvidence)
	}
	result := filepath.Join(a.Dir, "client", "result.json")
	fi, err := os.Stat(result)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(result, make([]byte, fi.Size()), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(ctlqBin, "show", "-d", c.dir, "p1.saturation", "-o", "json").Output()
	if err != nil {
		t.Fatalf("ctlq show: %v", err)
	}
	var d api.RunDetail
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if dmg := d.Damage(); len(dmg) != 1 || dmg[0].Attempt != 1 || !strings.Contains(dmg[0].Error, "damaged evidence: "+result) {
		t.Fatalf("ctlq show -o json damaged_evidence: %+v", dmg)
	}
	text, _ := exec.Command(ctlqBin, "show", "-d", c.dir, "p1.saturation").CombinedOutput()
	if !strings.Contains(string(text), "DAMAGED EVIDENCE: damaged evidence: "+result) {
		t.Fatalf("ctlq show does not name the damaged file:\n%s", text)
	}
	r := c.tableRow("p1.saturation")
	if r.ThroughputRPS != nil || len(r.DamagedEvidence) != 1 || !strings.Contains(r.DamagedEvidence[0], result) {
		t.Fatalf("report row over damaged evidence: throughput %v, damaged %v", r.ThroughputRPS, r.DamagedEvidence)
	}
}

// loopExt4 is an ext4 image on a loop device whose backing file lies on
// a small tmpfs of its own (backing), mounted at mnt with
// errors=remount-ro: filling the tmpfs makes the device's writes of new
// blocks fail, so ext4 meets real I/O errors.
type loopExt4 struct {
	mnt, backing, img string
}

// newLoopExt4 makes the tmpfs (tmpfsSize), a sparse image of imgSize in
// it made with mkfs.ext4 and mkfsArgs, and mounts it; the test is skipped
// where that cannot be done here.
func newLoopExt4(t *testing.T, tmpfsSize, imgSize string, mkfsArgs ...string) *loopExt4 {
	t.Helper()
	fs := &loopExt4{backing: testtmpfs.Mount(t, tmpfsSize), mnt: filepath.Join(t.TempDir(), "mnt")}
	fs.img = filepath.Join(fs.backing, "fs.img")
	_, e1 := fs.run("truncate", "-s", imgSize, fs.img)
	_, e2 := fs.run("mkfs.ext4", append(append([]string{"-q", "-F"}, mkfsArgs...), fs.img)...)
	if err := errors.Join(os.Mkdir(fs.mnt, 0o755), e1, e2); err != nil {
		t.Skipf("no ext4 image here: %v", err)
	}
	if err := fs.mount(); err != nil {
		t.Skipf("cannot loop-mount an ext4 image here: %v", err)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", fs.mnt).Run() })
	return fs
}

// run runs a command and returns its output, or an error that holds it.
func (fs *loopExt4) run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %v: %v %s", name, args, err, out)
	}
	return string(out), nil
}

func (fs *loopExt4) mount() error {
	_, err := fs.run("mount", "-o", "loop,errors=remount-ro", fs.img, fs.mnt)
	return err
}

// repair unmounts the file system, frees the tmpfs, checks the image
// (e2fsck's exit 1: errors corrected) and mounts it again.
func (fs *loopExt4) repair(t *testing.T) {
	t.Helper()
	os.Remove(filepath.Join(fs.backing, "filler"))
	_, e1 := fs.run("umount", fs.mnt)
	_, e2 := fs.run("e2fsck", "-fy", fs.img)
	if err := errors.Join(e1, e2); err != nil && !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("repair the file system: %v", err)
	}
	if err := fs.mount(); err != nil {
		t.Fatal(err)
	}
}

// faultWhileMeasuring starts a campaign of one pattern (its client
// measuring measureS seconds) on fs, calls fault while its run measures,
// and waits until the controller has released its lock and exited and
// the campaign's processes have ended. It returns the campaign and the
// attempt that was measuring.
func faultWhileMeasuring(t *testing.T, fs *loopExt4, measureS string, fault func()) (*campaign, api.Current) {
	t.Helper()
	c := newCampaign(t)
	c.dir = filepath.Join(fs.mnt, "camp")
	c.start(writeProtocol(t, scenario{patterns: 1, measureS: measureS}), "--fake-gpus", filepath.Join(t.TempDir(), "gpus"))
	cur := c.waitMeasuring()
	ctl := lockfile.Owner(dirlayout.Lock(c.dir))
	if ctl <= 0 {
		t.Fatal("no controller holds the lock while a run measures")
	}
	fault()
	c.waitUnlocked("the controller to end the work", 120*time.Second)
	// its lock gone, it may still hold files of the mount while it exits
	waitFor(t, "the controller to exit", 60*time.Second, func() bool { return !running(ctl) })
	waitFor(t, "the campaign's processes to end", 30*time.Second, func() bool { return len(c.campaignPIDs()) == 0 })
	return c, cur
}

// storageStatus is ctlq status -o json on the campaign, with the storage
// hint it gives when the controller is gone, and its exit code.
func (c *campaign) storageStatus() (doc struct {
	api.Status
	Hint string `json:"hint"`
}, code int) {
	c.t.Helper()
	st := exec.Command(ctlqBin, "status", "-d", c.dir, "-o", "json")
	out, _ := st.Output()
	if err := json.Unmarshal(out, &doc); err != nil {
		c.t.Fatalf("ctlq status -o json: %v\n%s", err, out)
	}
	return doc, st.ProcessState.ExitCode()
}

// The campaign directory's block device fails its writes (real I/O
// errors, from a loop device whose backing store is full) while a run
// measures. The controller ends the work; nothing of the campaign is left
// running; the run is not blamed (no client-failed or other workload
// reason), and ctlq status names the storage as the cause. Once the file
// system is repaired, resume completes the campaign with every evidence
// file as recorded and the charges covering what ran (crashcheck.Final).
func TestFailingDiskIsTheStorages(t *testing.T) {
	t.Parallel()
	fs := newLoopExt4(t, "48m", "512M")
	c, cur := faultWhileMeasuring(t, fs, "2", func() { fillUp(t, filepath.Join(fs.backing, "filler")) })
	doc, code := c.storageStatus()
	// the controller's own words (read-only, EIO, ENOSPC), or the
	// database's error where the stop that named the disk could not be
	// written and a later one was (docs/outcomes.md)
	cause := strings.ToLower(doc.Hint + " " + doc.Campaign.StopDetail)
	if !slices.ContainsFunc([]string{"read-only", "eio", "enospc", "no space left on device", "input/output error"}, func(s string) bool { return strings.Contains(cause, s) }) {
		t.Fatalf("ctlq status (exit %d) does not name the storage: state %s, stop %s: %s, hint %q",
			code, doc.Campaign.State, doc.Campaign.StopReason, doc.Campaign.StopDetail, doc.Hint)
	}
	t.Logf("ctlq status exit %d: state %s, stop %q, hint %q", code, doc.Campaign.State, doc.Campaign.StopDetail, doc.Hint)

	fs.repair(t)
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	as := c.attempts(s, cur.Run)
	s.Close()
	for _, a := range as {
		t.Logf("attempt %d: %s (%s)", a.N, a.State, a.Reason)
		if a.State == state.Failed && a.Reason != state.ReasonHarnessError {
			t.Errorf("attempt %d failed %s: the disk's failure blamed on the run", a.N, a.Reason)
		}
	}
	vs, err := crashcheck.Final(c.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// holedExt4 mounts an ext4 image on a tmpfs as newLoopExt4 does, and
// returns punch: with the file system frozen (fsfreeze: everything on
// disk), it allocates every block of the image in the tmpfs, then
// punches out the blocks ext4 has free, and fills the tmpfs. From then on
// rewriting a block in use succeeds (the database commits), while a
// write to a newly allocated block fails at writeback (the loop device's
// backing store is full): new files' data is lost, and after a remount
// reads back as zeros, as ext4 leaves a file after an I/O error.
func holedExt4(t *testing.T) (fs *loopExt4, punch func()) {
	t.Helper()
	fs = newLoopExt4(t, "300m", "256M", "-b", "4096", "-E", "nodiscard")
	mnt, img, backing, run := fs.mnt, fs.img, fs.backing, fs.run
	punch = func() {
		t.Helper()
		if _, err := run("fsfreeze", "-f", mnt); err != nil {
			t.Skipf("cannot freeze the file system: %v", err)
		}
		defer run("fsfreeze", "-u", mnt)
		out, err := run("dumpe2fs", img)
		if _, ferr := run("fallocate", "-l", "256M", img); err != nil || ferr != nil {
			t.Fatal(errors.Join(err, ferr))
		}
		for _, line := range strings.Split(out, "\n") {
			ranges, ok := strings.CutPrefix(line, "  Free blocks: ")
			if !ok || ranges == "" {
				continue
			}
			for _, r := range strings.Split(ranges, ", ") {
				var a, b int64
				if n, _ := fmt.Sscanf(r, "%d-%d", &a, &b); n == 1 {
					b = a
				}
				if _, err := run("fallocate", "-p", "-o", fmt.Sprint(a*4096), "-l", fmt.Sprint((b-a+1)*4096), img); err != nil {
					t.Fatal(err)
				}
			}
		}
		fillUp(t, filepath.Join(backing, "filler"))
	}
	return fs, punch
}

// The campaign directory's device fails the writes of new data while the
// database, rewriting blocks it already has, still commits: the issue of
// an attempt whose client's output and results are lost while its records
// are kept. The controller's fsync of the evidence meets the error: the
// attempt fails harness-error naming the file, not client-failed, and the
// campaign stops with the storage named in ctlq status. After a remount,
// any evidence file that came back NUL-filled is reported as damaged by
// ctlq show, with its path.
func TestEvidenceWriteErrorIsTheStorages(t *testing.T) {
	t.Parallel()
	fs, punch := holedExt4(t)
	c, cur := faultWhileMeasuring(t, fs, "3", punch)
	// the writes may all have landed in blocks ext4 held already (its
	// preallocations): then nothing was lost and the campaign completes;
	// a write of the journal's may have failed too: then the kernel
	// aborted it and remounted the file system read-only, no stop could
	// be recorded, and ctlq status (the controller gone: exit 4) names
	// the read-only file system, as in TestFailingDiskIsTheStorages; or
	// no write of the stop found room: the controller ended without one,
	// nothing new started, its log says why and the hint names a full
	// file system where statfs shows it (the holes are the backing's)
	doc, code := c.storageStatus()
	cp := doc.Campaign
	log, _ := os.ReadFile(dirlayout.Log(c.dir))
	switch {
	case cp.State == string(state.CampaignComplete):
	case cp.State == string(state.CampaignStopped):
		if cp.StopReason != state.StopForRun(state.ReasonHarnessError) || !strings.Contains(cp.StopDetail, c.dir) ||
			!strings.Contains(cp.StopDetail, "no space left on device") && !strings.Contains(cp.StopDetail, "I/O error") {
			t.Fatalf("ctlq status: stopped (%s: %s); want harness-error naming the storage", cp.StopReason, cp.StopDetail)
		}
	case code == 4 && (strings.Contains(doc.Hint, "read-only") || strings.Contains(doc.Hint, "file system is full") ||
		strings.Contains(string(log), "could not be recorded in "+c.dir)):
	default:
		t.Fatalf("ctlq status (exit %d): %s (%s: %s), hint %q; want stopped harness-error naming the storage, complete, or (the controller gone) the read-only or full file system named, or the unrecorded stop in the log", code, cp.State, cp.StopReason, cp.StopDetail, doc.Hint)
	}
	t.Logf("ctlq status (exit %d): %s (%s: %s), hint %q", code, cp.State, cp.StopReason, cp.StopDetail, doc.Hint)
	fs.repair(t)
	ro, err := state.OpenReadOnly(dirlayout.State(c.dir), 5*time.Second)
	if err == nil {
		ro.Close()
	}
	if errors.Is(err, state.ErrCorrupt) {
		// The device lost a page of a commit whose fdatasync it had
		// reported done (about 1 run in 12 here, the database then found
		// damaged before e2fsck runs: the lost write-back of a block
		// allocated after the punch). No program can keep a record the
		// device drops after saying it is written; what is asked then is
		// that nothing goes on from it: ctlq and resume refuse it (exit
		// 6) and resume keeps a copy, as for any damaged database.
		c.ctlqStatusExits(exitDamaged)
		rout, rcode := c.controller("resume", "-d", c.dir, "--foreground")
		kept, _ := filepath.Glob(dirlayout.State(c.dir) + campaigndir.DamagedSuffix + "*")
		if rcode != exitDamaged || len(kept) == 0 {
			t.Fatalf("resume on the damaged database exited %d, copies kept %q; want exit %d and a copy:\n%s", rcode, kept, exitDamaged, tail(rout, 2000))
		}
		t.Logf("the device lost a committed page: the database is damaged; ctlq and resume refuse it (exit 6), copy kept %s", filepath.Base(kept[0]))
		return
	}
	s := c.store()
	a := c.attempts(s, cur.Run)[cur.Attempt-1]
	s.Close()
	if a.State == state.Failed && a.Reason != state.ReasonHarnessError {
		t.Fatalf("attempt %d failed %s: the disk's failure blamed on the run", a.N, a.Reason)
	}
	// what came back NUL-filled is named by ctlq show, with its path
	out, err := exec.Command(ctlqBin, "show", "-d", c.dir, cur.Run, "-o", "json").Output()
	if err != nil {
		t.Fatalf("ctlq show: %v", err)
	}
	var d api.RunDetail
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	named := ""
	for _, e := range d.Damage() {
		named += e.Error + "\n"
	}
	for _, rel := range dirlayout.EvidenceChecked {
		path := filepath.Join(a.Dir, rel)
		if sum, err := safefile.SumFile(path); err == nil && sum.AllNUL && !strings.Contains(named, path) {
			t.Errorf("%s came back NUL-filled, but ctlq show does not name it (damaged: %q)", path, named)
		}
	}
	sum, err := safefile.SumFile(filepath.Join(a.Dir, state.StateFileName))
	t.Logf("attempt %d: %s (%s); state.json NUL-filled: %v (%v); damaged evidence named: %q", a.N, a.State, a.Reason, sum.AllNUL, err, named)

	// a campaign not complete resumes and completes once repaired
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); cp.State != string(state.CampaignComplete) && code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	vs, err := crashcheck.Final(c.dir, nil) // state.json rewritten from the database
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if !strings.Contains(v, "damaged evidence") || !strings.Contains(named, v[strings.Index(v, "damaged evidence"):]) {
			t.Error(v)
		}
	}
}
