package slurm

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSrunArgv(t *testing.T) {
	o := Options{Partition: "gpu", Account: "lab", Constraint: "h200", QueueTimeoutS: 30}
	got := o.SrunArgv(Request{GPUs: 2, CPUs: 8, JobName: "warden.c1.p1.a1"}, []string{"/opt/controller", "node-attempt"})
	want := []string{"srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=8", "--gres=gpu:2",
		"--job-name=warden.c1.p1.a1", "--immediate=30", "--partition=gpu", "--account=lab", "--constraint=h200",
		"--kill-on-bad-exit=1", "--input=0", "--", "/opt/controller", "node-attempt"}
	if !slices.Equal(got, want) {
		t.Errorf("srun argv\n got %q\nwant %q", got, want)
	}
	// inside an allocation: its own share of it, no new job
	got = Options{}.SrunArgv(Request{GPUs: 1, CPUs: 2, JobID: "41"}, []string{"x"})
	if !slices.Contains(got, "--jobid=41") || !slices.Contains(got, "--exact") || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "--job-name") }) {
		t.Errorf("step in an allocation: %q", got)
	}
	if a := (Options{Exclusive: true}).SrunArgv(Request{GPUs: 1, CPUs: 1, JobName: "j"}, []string{"x"}); !slices.Contains(a, "--exclusive") {
		t.Errorf("an exclusive step without --exclusive: %q", a)
	}
	if a := (Options{}).SallocArgv("n", 4, 16); !slices.Contains(a, "--no-shell") || !slices.Contains(a, "--immediate=600") || !slices.Contains(a, "--gres=gpu:4") {
		t.Errorf("salloc argv %q", a)
	}
}

func TestStepFromEnv(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "n2", "SLURM_STEP_GPUS": "2,3"}
	s, err := StepFromEnv(func(k string) string { return env[k] })
	if err != nil || s.JobID != "12" || s.StepID != "0" || s.Node != "n2" || !slices.Equal(s.GPUs, []int{2, 3}) {
		t.Fatalf("step %+v, %v", s, err)
	}
	env["SLURM_STEP_GPUS"] = "2,x"
	if _, err := StepFromEnv(func(k string) string { return env[k] }); err == nil {
		t.Error("a malformed SLURM_STEP_GPUS was accepted")
	}
	delete(env, "SLURM_JOB_ID")
	if _, err := StepFromEnv(func(k string) string { return env[k] }); err == nil {
		t.Error("outside a step: no error")
	}
}

func TestParseQueue(t *testing.T) {
	out := "12|warden.c1.p1.a1|RUNNING\n13|someone-else|PENDING\n14|warden.c1.p2.a1|PENDING\n\n"
	jobs := parseQueue([]byte(out), CampaignPrefix("c1"))
	if len(jobs) != 2 || jobs[0].ID != "12" || jobs[1].State != "PENDING" {
		t.Errorf("jobs %+v", jobs)
	}
}

func TestParseAccounting(t *testing.T) {
	out := "12|CANCELLED by 0|2026-11-30T17:01:02|2026-11-30T17:01:09|0:9|n1\n" +
		"12.0|CANCELLED|2026-11-30T17:01:03|2026-11-30T17:01:09|0:9|n1\n" +
		"13|RUNNING|2026-11-30T17:02:00|Unknown|0:0|n2\n"
	recs, err := parseAccounting([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].State != "CANCELLED" || recs[1].ID != "12.0" || recs[2].Finished() {
		t.Fatalf("records %+v", recs)
	}
	start, end, ended := Span(recs[:2])
	if !ended || end.Sub(start) != 7*time.Second {
		t.Errorf("span %v..%v ended %v, want 7 s, ended", start, end, ended)
	}
	if _, _, ended := Span(recs); ended {
		t.Error("a running record counted as ended")
	}
	if _, _, ended := Span(nil); ended {
		t.Error("no records counted as ended")
	}
	if _, err := parseAccounting([]byte("12|COMPLETED|x\n")); err == nil {
		t.Error("a short line was accepted")
	}
	if _, err := parseAccounting([]byte("12|COMPLETED|yesterday|None|0:0|n1\n")); err == nil {
		t.Error("an unreadable time was accepted")
	}
}

func TestAllocationGranted(t *testing.T) {
	id, err := AllocationGranted([]byte("salloc: Granted job allocation 57\nsalloc: Waiting for resource configuration\n"))
	if err != nil || id != "57" {
		t.Errorf("id %q, %v", id, err)
	}
	if _, err := AllocationGranted([]byte("salloc: error: Unable to allocate resources: Requested node configuration is not available\n")); err == nil {
		t.Error("a refusal read as a grant")
	}
}
