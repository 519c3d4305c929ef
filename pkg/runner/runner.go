package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/attempt"
	"warden/pkg/budget"
	"warden/pkg/capacity"
	"warden/pkg/endlog"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/schedule"
	"warden/pkg/slurmexec"
	"warden/pkg/state"
	"warden/protocols"
)

// Config is everything a Runner needs; the caller opens and owns each
// part (the store, the GPU backend, the reaper behind the launcher) and
// closes it after Run returns.
type Config struct {
	// Dir is the campaign directory, absolute.
	Dir string
	// Plan is the campaign's expanded plan (DIR/plan.json).
	Plan *protocols.Plan
	// Store is the campaign's state database, open for writing.
	Store *state.Store
	// GPUs reads the host's GPUs.
	GPUs attempt.GPUs
	// Launcher starts every child process; its Reaper must be running.
	Launcher *launch.Launcher
	// Cgroups contains the attempts' processes; nil or not Available:
	// process groups and sessions only.
	Cgroups *launch.Manager
	// Boot is the boot id source identities are taken and checked with.
	// nil: the kernel's.
	Boot launch.BootIDSource
	// Now is the clock, and After its timer. nil: time.Now, time.After.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Log receives the runner's log lines.
	Log zerolog.Logger
	// UID is the user whose processes are the campaign's own; another
	// user's process on a GPU is foreign.
	UID int
	// Workdir is where commands run; ProtocolPath the protocol file
	// (absolute), whose directory is ${PROTOCOL_DIR}.
	Workdir, ProtocolPath string
	// FakeGPUDir, when set, is exported to every child as the fake GPU
	// backend's directory.
	FakeGPUDir string
	// Private indexes the private inputs, no run of which (of the
	// protocol's leak length) any artifact may contain (see PrivateIndex).
	Private *gates.PrivateIndex
	// Slurm, when set, runs every attempt as a Slurm step (slurmexec);
	// nil: on this host.
	Slurm *slurmexec.Config
	// RetrySharedCause launches the runs not tried yet that share the
	// cause of a failed run (outcome.SharedCause), which are otherwise
	// held until an amendment covers the failed run: the operator's
	// controller resume --retry-shared-cause.
	RetrySharedCause bool
}

// heartbeatEvery is how often the runner records that it is alive, and
// resyncEvery how often the loop looks at all the records when nothing
// happened (it looks at once after every unit ends). Both keep the
// controller's own CPU use negligible beside the benchmark it measures.
const (
	heartbeatEvery = 10 * time.Second
	resyncEvery    = 30 * time.Second
)

// Runner drives one campaign: it reconciles what a previous controller
// left (Reconcile), then executes runs until the campaign completes, stops
// for review, or Stop is called (Run).
type Runner struct {
	dir          string
	workdir      string
	protocolPath string
	fakeGPUDir   string
	plan         atomic.Pointer[protocols.Plan] // the plan in force; Reload replaces it
	store        *state.Store
	cgroups      *launch.Manager
	starter      *launch.Launcher
	gpus         attempt.GPUs
	log          zerolog.Logger
	boot         launch.BootIDSource
	uid          int
	now          func() time.Time
	after        func(time.Duration) <-chan time.Time
	private      *gates.PrivateIndex
	// privCache holds the campaign's own files found clean and unchanged
	// by the privacy scan after earlier attempts.
	privCache gates.ScanCache
	gatesRead state.GateIndex // the gate verdicts gateVerdicts read so far
	// exec runs the attempts: on this host, or each as a Slurm step.
	exec executor
	// retrySharedCause: hold no run for a cause it shares (Config).
	retrySharedCause bool

	flights budget.Flights // attempts whose server holds GPUs, not yet charged

	// storageFailed is closed, and storageErr set, when the campaign
	// directory refuses writes for good (failStorage).
	storageOnce   sync.Once
	storageFailed chan struct{}
	storageErr    error

	// diskFull counts the times the controller's own writes to the
	// campaign directory failed with ENOSPC or EDQUOT; diskFullErr is the
	// last such error. An attempt that ends failed while the count grew is
	// classed as the harness's (diskFullClass).
	diskFull    atomic.Int64
	diskFullErr atomic.Pointer[string]

	// ends is the campaign's end log (endlog.File), opened by Claim; nil
	// when it could not be prepared.
	ends *endlog.Log

	freezeMu sync.Mutex       // guards freeze
	freeze   *state.Amendment // a freeze to record once the runs in flight ended

	stopOnce sync.Once
	stopReq  chan struct{} // closed when an operator asks the runner to stop

	stops schedule.StopKeeper // the campaign's stop for review, the first one asked for kept

	// Owned by the loop goroutine.
	active   map[int]*unitRun // unit number -> its runner
	busy     map[string]int   // slot name -> unit number using it
	results  chan unitResult
	reserved map[string]float64 // run id -> GPU-seconds reserved and not yet released
	// releasing are reservations released and not yet recorded: they go
	// with the next wave's reservations, in one commit, or flushReleases.
	releasing []state.LedgerEntry
	regime    protocols.RegimeInfo
	capacity  *capacity.Records // the capacity points judged and recorded
	// measured are the power check's measurements read so far (the latest
	// per run, attempt and measure), up to the verdict numbered measuredSeq.
	measured    map[string]schedule.Measurement
	measuredSeq uint64
}

// New checks cfg and returns a Runner ready to Reconcile and Run.
func New(cfg Config) (*Runner, error) {
	switch {
	case cfg.Dir == "" || cfg.Plan == nil || cfg.Store == nil:
		return nil, errors.New("runner: Dir, Plan and Store are required")
	case cfg.GPUs == nil && cfg.Slurm == nil:
		return nil, errors.New("runner: GPUs is required (the Slurm executor reads them on the nodes)")
	case cfg.Launcher == nil || cfg.Launcher.Reaper == nil:
		return nil, errors.New("runner: a Launcher with a running Reaper is required")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	r := &Runner{
		dir: cfg.Dir, workdir: cfg.Workdir, protocolPath: cfg.ProtocolPath, fakeGPUDir: cfg.FakeGPUDir,
		store: cfg.Store, cgroups: cfg.Cgroups, starter: cfg.Launcher, gpus: cfg.GPUs,
		log: cfg.Log, boot: cfg.Boot, uid: cfg.UID, now: now, private: cfg.Private,
		capacity: &capacity.Records{Dir: cfg.Dir, Store: cfg.Store, Log: cfg.Log},
		stopReq:  make(chan struct{}), storageFailed: make(chan struct{}), active: map[int]*unitRun{}, busy: map[string]int{},
		results: make(chan unitResult, 64), reserved: map[string]float64{},
		retrySharedCause: cfg.RetrySharedCause, after: cfg.After,
	}
	if r.after == nil {
		r.after = time.After
	}
	r.plan.Store(cfg.Plan)
	r.exec = localExecutor{r}
	if cfg.Slurm != nil {
		r.exec = slurmExecutor{c: r, x: slurmexec.New(*cfg.Slurm, cfg.Store, cfg.Launcher, cfg.Log)}
	}
	return r, nil
}

// Reload puts an amended plan in force: the next scheduling decision uses
// it; an attempt in flight keeps the plan (and the run) it started under.
// The amended plan has the same runs as the one it replaces.
func (c *Runner) Reload(p *protocols.Plan) {
	c.plan.Store(p)
	c.log.Info().Str("protocol_sha256", p.Protocol.SHA256).Msg("amended plan in force")
}

// Freeze ends the runs in flight as Stop does, then freezes the matrix
// with amendment a (state.Store.Freeze): every run without a result
// not-run, the campaign frozen; Run then returns.
func (c *Runner) Freeze(a state.Amendment) {
	c.freezeMu.Lock()
	c.freeze = &a
	c.freezeMu.Unlock()
	c.Stop()
}

func (c *Runner) pendingFreeze() *state.Amendment {
	c.freezeMu.Lock()
	defer c.freezeMu.Unlock()
	return c.freeze
}

// currentPlan is the plan in force.
func (c *Runner) currentPlan() *protocols.Plan { return c.plan.Load() }

// Stop asks Run to end the runs in flight (interrupted, resumable), record
// an operator's stop and return. It returns at once; it is safe to call
// from any goroutine, more than once.
func (c *Runner) Stop() {
	c.stopOnce.Do(func() { close(c.stopReq) })
}

// heartbeat records that the controller is alive.
func (c *Runner) heartbeat() {
	err := c.store.UpdateCampaign(func(cp *state.Campaign) error {
		cp.Heartbeat = c.now()
		return nil
	})
	if err != nil {
		c.log.Error().Err(err).Msg("heartbeat")
		c.stopIfStorageFault(err)
	}
}

// accountOf is the budget as the ledger cp holds stands, with the
// releases not yet recorded (releasing) taken off the reservations.
func (c *Runner) accountOf(cp state.Campaign) budget.Account {
	reserved := cp.ReservedGPUSeconds
	for _, e := range c.releasing {
		reserved -= e.GPUSeconds
	}
	return budget.Account{
		CapGPUSeconds:      budget.Seconds(cp.BudgetCapGPUHours),
		ConsumedGPUSeconds: cp.ConsumedGPUSeconds,
		ReservedGPUSeconds: max(reserved, 0),
	}
}

// stopCampaign records a stop for review: nothing new is launched. A
// campaign that is not running (stopped already, or complete) keeps its
// first reason; so does one whose first stop could not be written: the
// next stop records that one instead (schedule.StopKeeper).
func (c *Runner) stopCampaign(s schedule.Stop) {
	if _, err := c.stops.Record(s, c.campaignRuns, c.putStop); err != nil {
		c.log.Error().Err(err).Msg("record stop")
		if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO) {
			c.failStorage(err)
		}
	}
}

// writeHeldStop writes the stop the database refused before (StopKeeper
// holds it), or says why it still cannot.
func (c *Runner) writeHeldStop() error {
	held, err := c.stops.Flush(c.campaignRuns, c.putStop)
	if held == nil {
		return nil
	}
	return fmt.Errorf("the campaign's stop for review (%s: %s) could not be recorded in %s (%w): the controller ends so that nothing new starts; resume once the campaign directory takes writes again",
		held.Reason, held.Detail, c.dir, err)
}

// campaignRuns: the record says the campaign runs, or cannot be read.
func (c *Runner) campaignRuns() bool {
	cp, err := c.store.Campaign()
	return err != nil || cp.State == state.CampaignRunning
}

// putStop writes s as the campaign's stop for review.
func (c *Runner) putStop(s schedule.Stop) error {
	c.log.Warn().Str("reason", string(s.Reason)).Str("detail", s.Detail).Interface("figures", s.Figures).Msg("campaign stopped for review")
	return c.store.SetCampaignState(state.CampaignStopped, string(s.Reason), s.Detail, s.Figures)
}

// Reconcile looks at what a previous controller left and ends it: see
// reconcileLeftovers. Call it once, before Run.
func (c *Runner) Reconcile(ctx context.Context) error { return c.reconcileLeftovers(ctx) }

// Claim records the process pid as the campaign's controller: its pid,
// the host's boot id and a fresh heartbeat. A campaign stopped for review
// runs again: an operator resumed it. Call it once, after Reconcile and
// before Run.
func (c *Runner) Claim(pid int) error {
	bootID, _ := c.bootID()
	err := c.store.UpdateCampaign(func(cp *state.Campaign) error {
		cp.ControllerPID = pid
		cp.ControllerBootID = bootID
		cp.Heartbeat = c.now()
		return nil
	})
	if err != nil {
		return err
	}
	if c.ends == nil {
		if c.ends, err = endlog.Open(c.dir); err != nil {
			c.log.Warn().Err(err).Msg("prepare the end log: an attempt whose end cannot be recorded is charged until the resume")
		}
	}
	cp, err := c.store.Campaign()
	if err != nil || cp.State != state.CampaignStopped {
		return err
	}
	return c.store.SetCampaignState(state.CampaignRunning, "resume", "resumed by an operator after review", nil)
}

// bootID is the host's boot id, as the runner's source tells it.
func (c *Runner) bootID() (string, error) { return c.boot.Read() }
