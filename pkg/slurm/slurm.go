// Package slurm is what the controller asks of a Slurm cluster: the srun
// command line of an attempt's step, the step's identity as the node sees
// it, and the queue and accounting queries and cancellations resume needs.
//
// Every command runs through an Exec the caller supplies: the controller
// runs its children through its own launcher and reaper, and a second
// waiter would steal their exits. The package starts no process itself.
package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"warden/protocols"
)

// Options say where the campaign's steps run: the protocol's or the
// command line's choices, recorded in the campaign for resume.
type Options struct {
	// Partition, Account and Constraint are srun's -p, -A and -C; empty:
	// the cluster's defaults.
	Partition  string `json:"partition,omitempty"`
	Account    string `json:"account,omitempty"`
	Constraint string `json:"constraint,omitempty"`
	// Exclusive gives each step's job a node of its own (--exclusive).
	Exclusive bool `json:"exclusive,omitempty"`
	// QueueTimeoutS bounds how long a step waits for its resources
	// (srun --immediate): srun otherwise waits forever for a busy
	// cluster. 0: DefaultQueueTimeoutS.
	QueueTimeoutS int `json:"queue_timeout_s,omitempty"`
	// NodeController is the controller binary the nodes run as an
	// attempt's node-side runner, at the same path on every node (a
	// shared file system); empty: the running controller's own path.
	NodeController string `json:"node_controller,omitempty"`
}

// DefaultQueueTimeoutS is how long a step waits for busy resources when
// the options do not say: the protocol format's default.
const DefaultQueueTimeoutS = protocols.DefaultQueueTimeoutS

// Request is what one attempt's step asks for, on one node.
type Request struct {
	GPUs int
	CPUs int
	// JobName names the job (a new job per attempt); JobID, when set,
	// runs the step inside that allocation instead (--jobid, --exact).
	JobName string
	JobID   string
}

// SrunArgv is the srun command line that runs argv as one task on one
// node with the request's GPUs and CPUs. srun's standard input goes to the
// task, and the task's standard output comes back line by line.
func (o Options) SrunArgv(req Request, argv []string) []string {
	out := []string{"srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=" + strconv.Itoa(max(1, req.CPUs))}
	if req.GPUs > 0 {
		out = append(out, "--gres=gpu:"+strconv.Itoa(req.GPUs))
	}
	if req.JobID != "" {
		// a step of an allocation: its own GPUs and CPUs of it
		out = append(out, "--jobid="+req.JobID, "--exact")
	} else {
		out = append(out, "--job-name="+req.JobName, "--immediate="+strconv.Itoa(o.queueTimeout()))
		out = append(out, o.placement()...)
	}
	// the task's end ends the step; a failed task is not waited on
	out = append(out, "--kill-on-bad-exit=1", "--input=0")
	return append(append(out, "--"), argv...)
}

// SallocArgv is the salloc command line that allocates GPUs and CPUs on
// one node, without a shell, for steps to run in (a co-location check).
func (o Options) SallocArgv(name string, gpus, cpus int) []string {
	out := []string{"salloc", "--no-shell", "--nodes=1", "--ntasks=1", "--cpus-per-task=" + strconv.Itoa(max(1, cpus)),
		"--job-name=" + name, "--immediate=" + strconv.Itoa(o.queueTimeout())}
	if gpus > 0 {
		out = append(out, "--gres=gpu:"+strconv.Itoa(gpus))
	}
	return append(out, o.placement()...)
}

func (o Options) placement() []string {
	var out []string
	if o.Exclusive {
		out = append(out, "--exclusive")
	}
	if o.Partition != "" {
		out = append(out, "--partition="+o.Partition)
	}
	if o.Account != "" {
		out = append(out, "--account="+o.Account)
	}
	if o.Constraint != "" {
		out = append(out, "--constraint="+o.Constraint)
	}
	return out
}

func (o Options) queueTimeout() int {
	if o.QueueTimeoutS > 0 {
		return o.QueueTimeoutS
	}
	return DefaultQueueTimeoutS
}

// JobName is the name of an attempt's job: every job of a campaign
// starts with CampaignPrefix(campaign).
func JobName(campaign, run string, attempt int) string {
	return CampaignPrefix(campaign) + run + ".a" + strconv.Itoa(attempt)
}

// CampaignPrefix is the prefix of every job name of a campaign.
func CampaignPrefix(campaign string) string { return "warden." + campaign + "." }

// AllocationGranted reads the job id from salloc's output ("salloc:
// Granted job allocation 12").
func AllocationGranted(out []byte) (string, error) {
	const marker = "Granted job allocation "
	i := bytes.Index(out, []byte(marker))
	if i < 0 {
		return "", fmt.Errorf("salloc granted no allocation: %s", strings.TrimSpace(string(out)))
	}
	f := strings.Fields(string(out[i+len(marker):]))
	if len(f) == 0 {
		return "", fmt.Errorf("salloc: no job id after %q", marker)
	}
	return f[0], nil
}

// Step is a step's identity as its task sees it.
type Step struct {
	JobID, StepID, Node string
	// GPUs are the node's indices of the step's GPUs (SLURM_STEP_GPUS,
	// or SLURM_JOB_GPUS when only that is set).
	GPUs []int
	// GPUsText is the variable as Slurm set it.
	GPUsText string
}

// StepFromEnv reads the step's identity from the variables Slurm sets in
// a task's environment.
func StepFromEnv(getenv func(string) string) (Step, error) {
	s := Step{JobID: getenv("SLURM_JOB_ID"), StepID: getenv("SLURM_STEP_ID"), Node: getenv("SLURMD_NODENAME")}
	if s.JobID == "" || s.StepID == "" || s.Node == "" {
		return s, errors.New("not in a Slurm step: SLURM_JOB_ID, SLURM_STEP_ID or SLURMD_NODENAME is not set")
	}
	s.GPUsText = getenv("SLURM_STEP_GPUS")
	if s.GPUsText == "" {
		s.GPUsText = getenv("SLURM_JOB_GPUS")
	}
	if s.GPUsText == "" {
		return s, nil
	}
	for _, f := range strings.Split(s.GPUsText, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return s, fmt.Errorf("SLURM_STEP_GPUS=%q: %w", s.GPUsText, err)
		}
		s.GPUs = append(s.GPUs, n)
	}
	return s, nil
}

// Exec runs a command and returns its standard output; an error carries
// its exit status and standard error.
type Exec func(ctx context.Context, argv []string) ([]byte, error)

// Client queries and cancels through the cluster's commands.
type Client struct {
	Exec Exec
}

// Job is a job in the queue.
type Job struct {
	ID, Name, State string
}

// Jobs lists the jobs in the queue whose name starts with prefix.
func (c Client) Jobs(ctx context.Context, prefix string) ([]Job, error) {
	out, err := c.Exec(ctx, []string{"squeue", "--noheader", "--format=%i|%j|%T"})
	if err != nil {
		return nil, fmt.Errorf("squeue: %w", err)
	}
	return parseQueue(out, prefix), nil
}

func parseQueue(out []byte, prefix string) []Job {
	var jobs []Job
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 || !strings.HasPrefix(f[1], prefix) {
			continue
		}
		jobs = append(jobs, Job{ID: f[0], Name: f[1], State: f[2]})
	}
	return jobs
}

// Cancel cancels a job (and so every step of it) at once: SIGKILL to all
// its processes, which Slurm's process tracking finds however they
// escaped.
func (c Client) Cancel(ctx context.Context, job string) error {
	if _, err := c.Exec(ctx, []string{"scancel", job}); err != nil {
		return fmt.Errorf("scancel %s: %w", job, err)
	}
	return nil
}

// Record is a job's or a step's accounting record.
type Record struct {
	// ID is "12" for the job, "12.0" for a step, "12.batch", ...
	ID         string
	State      string // COMPLETED, CANCELLED, FAILED, RUNNING, ...
	Start, End time.Time
	ExitCode   string // "0:0": exit code and signal
	Nodes      string
}

// Finished says whether Slurm recorded the record's end.
func (r Record) Finished() bool { return !r.End.IsZero() }

// Accounting reads the job's records and its steps' from sacct. The exit
// codes come from sacct's parsable output (its JSON reports every
// non-zero exit as 0).
func (c Client) Accounting(ctx context.Context, job string) ([]Record, error) {
	return c.sacct(ctx, "--jobs="+job)
}

// AccountingByName reads the records of the jobs named name that started
// after since (a job whose id was never learnt).
func (c Client) AccountingByName(ctx context.Context, name string, since time.Time) ([]Record, error) {
	return c.sacct(ctx, "--name="+name, "--starttime="+since.Local().Format(sacctTime))
}

func (c Client) sacct(ctx context.Context, sel ...string) ([]Record, error) {
	argv := append([]string{"sacct", "--noheader", "--parsable2"}, sel...)
	out, err := c.Exec(ctx, append(argv, "--format=JobID,State,Start,End,ExitCode,NodeList"))
	if err != nil {
		return nil, fmt.Errorf("sacct: %w", err)
	}
	return parseAccounting(out)
}

// sacctTime is sacct's time format, in the cluster's local time.
const sacctTime = "2006-01-02T15:04:05"

func parseAccounting(out []byte) ([]Record, error) {
	var recs []Record
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 6 {
			return nil, fmt.Errorf("sacct line %q: want 6 fields", line)
		}
		r := Record{ID: f[0], State: strings.Fields(f[1] + " ")[0], ExitCode: f[4], Nodes: f[5]}
		var err error
		if r.Start, err = parseSacctTime(f[2]); err != nil {
			return nil, err
		}
		if r.End, err = parseSacctTime(f[3]); err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// parseSacctTime reads a time sacct printed; "Unknown", "None" and empty
// are the zero time (not started, not ended).
func parseSacctTime(s string) (time.Time, error) {
	switch s {
	case "", "Unknown", "None":
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation(sacctTime, s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("sacct time %q: %w", s, err)
	}
	return t, nil
}

// Records are the records of id among recs.
func Records(recs []Record, id string) []Record {
	var out []Record
	for _, r := range recs {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// Span is the earliest start and the latest end of the records, and
// whether every record has ended.
func Span(recs []Record) (start, end time.Time, ended bool) {
	ended = len(recs) > 0
	for _, r := range recs {
		if !r.Start.IsZero() && (start.IsZero() || r.Start.Before(start)) {
			start = r.Start
		}
		if r.End.After(end) {
			end = r.End
		}
		if !r.Finished() {
			ended = false
		}
	}
	return start, end, ended
}
