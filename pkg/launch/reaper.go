package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxUnknown is how many exits of unknown pids a Reaper keeps.
const maxUnknown = 64

// ExitStatus is how a process ended, as wait4 reported it.
type ExitStatus struct {
	// Code is the exit code, or -1 when the process was killed by a signal.
	Code int
	// Signal names the signal that killed the process ("SIGKILL"), or ""
	// when it exited.
	Signal string
	// CoreDumped is true when the kernel wrote a core file.
	CoreDumped bool
	// Rusage is the resource usage of the process and its reaped children.
	Rusage unix.Rusage
	// At is when the reaper collected the status; zero until then.
	At time.Time
}

func exitStatus(ws unix.WaitStatus, ru unix.Rusage, at time.Time) ExitStatus {
	st := ExitStatus{Code: -1, Rusage: ru, At: at}
	switch {
	case ws.Exited():
		st.Code = ws.ExitStatus()
	case ws.Signaled():
		st.Signal = signalName(ws.Signal())
		st.CoreDumped = ws.CoreDump()
	}
	return st
}

// UnknownExit is the exit of a pid no Proc was registered for: a descendant
// that was orphaned and reparented to this process as child subreaper.
type UnknownExit struct {
	PID    int
	Status ExitStatus
}

// Reaper is the only owner of exit statuses in the process. One goroutine
// waits for SIGCHLD and then calls wait4(-1, WNOHANG) until no exited child
// is left, handing each status to the Proc registered for its pid, or
// recording it as an UnknownExit.
//
// Because it waits for any child, nothing else in the process may wait for
// children: exec.Cmd.Wait, os.Process.Wait and a second Reaper would each
// lose statuses to it, or steal them from it. Start every child through a
// Launcher.
//
// Registration cannot miss an early exit: Launcher.Start holds mu from
// before the fork until the new Proc is registered, and the reaper calls
// wait4 only while holding mu. A child that exits at once therefore stays a
// zombie until it is registered, which also keeps its /proc entry (and its
// start time) readable for Start, and keeps its pid from being reused.
type Reaper struct {
	sigs chan os.Signal // SIGCHLD, buffered: a signal that arrives while one is pending is redundant

	mu           sync.Mutex    // held around wait4 and around fork+register; guards the fields below
	procs        map[int]*Proc // running children, by pid
	unknownCount int           // exits of unknown pids since NewReaper
	unknown      []UnknownExit // the last maxUnknown of them, oldest first
	running      bool          // between Start and Close
	cancel       context.CancelFunc

	wg sync.WaitGroup // the reaping goroutine
}

// NewReaper returns a Reaper that is not yet running.
func NewReaper() *Reaper {
	return &Reaper{sigs: make(chan os.Signal, 1), procs: make(map[int]*Proc)}
}

// Start begins reaping: it subscribes to SIGCHLD, reaps whatever exited
// before, and keeps reaping until ctx ends or Close is called. A Reaper
// runs at most once.
func (r *Reaper) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running || r.cancel != nil {
		return errors.New("start reaper: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	r.running = true
	signal.Notify(r.sigs, syscall.SIGCHLD)
	r.wg.Add(1)
	go r.loop(ctx)
	return nil
}

func (r *Reaper) loop(ctx context.Context) {
	defer r.wg.Done()
	defer signal.Stop(r.sigs)
	r.reap()
	for {
		select {
		case <-ctx.Done():
			r.reap()
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		case <-r.sigs:
			r.reap()
		}
	}
}

// Close stops the reaping goroutine and waits for it. Procs that have not
// exited yet will never see Done after that.
func (r *Reaper) Close() error {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel == nil {
		return errors.New("close reaper: not started")
	}
	cancel()
	r.wg.Wait()
	return nil
}

// Collect reaps every child that has exited by now, without waiting for
// the SIGCHLD that would wake the reaping goroutine. A caller about to
// judge a process by a timer calls it first: after the whole controller
// was stopped (SIGSTOP, a freezer) the timer and the pending SIGCHLD are
// read in no set order, and an exit that already happened must win.
func (r *Reaper) Collect() { r.reap() }

// reap collects every exited child.
func (r *Reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			// ECHILD: no children at all; 0: none has exited.
			return
		}
		st := exitStatus(ws, ru, time.Now())
		if p, ok := r.procs[pid]; ok {
			delete(r.procs, pid)
			p.exit = st
			close(p.done)
			continue
		}
		r.unknownCount++
		r.unknown = append(r.unknown, UnknownExit{PID: pid, Status: st})
		if len(r.unknown) > maxUnknown {
			r.unknown = r.unknown[len(r.unknown)-maxUnknown:]
		}
	}
}

// Unknown returns how many exits of unknown pids were reaped, and the last
// few of them, oldest first.
func (r *Reaper) Unknown() (count int, last []UnknownExit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unknownCount, append([]UnknownExit(nil), r.unknown...)
}

// Proc is a process started by a Launcher: the leader of its own process
// group (or session), whose exit the Reaper reports.
type Proc struct {
	Identity
	// Role is the caller's name for the process ("server", "client").
	Role string
	// PGID is the process group id: always PID.
	PGID int
	// Setsid is true when the process leads its own session (SID == PID).
	Setsid bool
	// Cgroup is the leaf cgroup directory the process was placed in, or ""
	// when it was started without one.
	Cgroup string
	// CPUs is the affinity the process started with; empty: inherited.
	CPUs []int
	// Started is when the fork was made.
	Started time.Time
	// Stop is Spec.Stop: the grace periods Shutdown uses.
	Stop StopOptions

	boot BootIDSource
	leaf Leaf
	done chan struct{} // closed by the reaper after exit is set
	exit ExitStatus    // written once by the reaper before done is closed
}

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended. Before Done is closed it returns the
// zero ExitStatus (At is zero).
func (p *Proc) Exit() ExitStatus {
	select {
	case <-p.done:
		return p.exit
	default:
		return ExitStatus{}
	}
}

// Leaf returns the process's leaf cgroup (the zero Leaf when none).
func (p *Proc) Leaf() Leaf { return p.leaf }

// Boot returns the boot id source the process's identity is checked with.
func (p *Proc) Boot() BootIDSource { return p.boot }

func (p *Proc) String() string {
	return fmt.Sprintf("%s %s", p.Role, p.Identity)
}
