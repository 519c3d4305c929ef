// Package launch starts, pins, contains, signals and reaps the processes of
// a campaign, and owns process identity. It never touches the database:
// callers record what it returns (Identity, SignalRecord, ExitStatus, leaf
// paths) themselves.
//
// # Identity
//
// A process is named by the triple (pid, start time, boot id): Identity.
// The start time is field 22 of /proc/PID/stat (clock ticks since boot),
// parsed after the last ')' because the command name may contain spaces
// and parentheses. A bare pid is never trusted: Signal, SignalGroup, Stop
// and Reclaim check all three before sending anything, and return
// ErrNotOurs (another process has the pid, or the host rebooted) or ErrGone
// (the process has exited; a zombie counts as exited) instead. Single
// processes are signalled through a pidfd opened before the check, so pid
// reuse cannot slip between check and signal. The boot id is read through
// an injectable BootIDSource so tests can simulate a reboot.
//
// Whose a recorded process is never rests on its environment alone: a
// process can rewrite /proc/PID/environ (setproctitle reuses argv and
// environ for its title). EnvValue says found only when the entry is
// there; the runner's resume treats a WARDEN_CAMPAIGN_DIR naming another
// campaign as foreign, and a process whose environment names none as its
// own when its identity, recorded cgroup and process group (Group; set at
// spawn, changed only by setpgid or setsid) match.
//
// # One reaper
//
// A Reaper is the only code in the process that waits for children: one
// goroutine, woken by SIGCHLD (a buffered signal.Notify channel), calls
// wait4(-1, WNOHANG) until nothing is left to collect and hands each status
// to the Proc registered for its pid. Statuses of unknown pids (orphaned
// descendants reparented to the controller, which is a child subreaper
// through BecomeSubreaper) are counted and the last few kept. Consequently
// nothing else in the process may wait for children: no exec.Cmd.Run,
// Wait or Output, no os.Process.Wait. Processes are started with
// syscall.ForkExec. Launcher.Start holds the reaper's lock from before the
// fork until the Proc is registered, so a child that exits at once stays a
// zombie until then: its exit is never lost, its start time is still
// readable, and its pid cannot be reused meanwhile. (ForkExec's own
// wait4 on a child whose exec failed also runs under that lock.)
//
// # Affinity from the first instruction
//
// A process inherits the CPU mask of the thread that forked it. With
// Spec.CPUs set, Start forks from a goroutine locked to its OS thread whose
// mask is set first; so the child, every thread it creates and every child
// it forks start on the mask, with no window in which they run elsewhere.
// (Setting the mask of a running child after the fact misses threads and
// children it has already made.) The forking thread's mask is then
// restored; if that fails the thread is discarded by returning while
// locked. See forkExec for why restoring is preferred.
//
// # Containment and cgroup layout
//
// Every process started leads its own process group (Setpgid), or its own
// session (Spec.Setsid). Where cgroup v2 is writable, a Manager creates
// <mount>/<controller's own cgroup>/warden-<campaign>/<leaf> and the child
// is created directly in its leaf (clone3 with CLONE_INTO_CGROUP), so a
// descendant that leaves the group (setsid, double fork) is still found in
// cgroup.procs and ended by cgroup.kill. No controllers are enabled (see
// Manager for the no-internal-process rule). The cgroup2 mount is looked
// up in /proc/self/mountinfo; it is /sys/fs/cgroup on unified hosts and
// /sys/fs/cgroup/unified on hybrid ones.
//
// # Fallbacks
//
//   - No writable cgroup2: Manager.Available is false, Mode says why, and
//     processes are contained by process groups and sessions only. A
//     descendant that escapes its group then survives Stop; as the
//     controller is a subreaper it is at least reparented to it, and its
//     exit shows up in Reaper.Unknown.
//   - clone3 into a cgroup unsupported (Linux before 5.7: ENOSYS, or
//     EINVAL): the pid is written to cgroup.procs right after the fork.
//     Anything the child forks before that write stays outside the leaf.
//   - No cgroup.kill (Linux before 5.14): the leaf is frozen
//     (cgroup.freeze), each listed pid gets SIGKILL, and the leaf is thawed;
//     without the freezer a fork racing the listing can escape the kill,
//     which the wait-until-empty that follows then reports.
//   - No pidfd_open (before 5.3): check-then-kill, with a window of
//     microseconds for pid reuse.
//
// # Shutdown
//
// Stop sends SIGTERM to the leader (the API parent) alone, waits up to
// Grace for the reaper to report its exit, then SIGTERM to the group and
// to each process of the leaf, waits up to GroupGrace polling /proc and
// cgroup.events (1 ms after the first look, the wait doubling up to
// 20 ms), then SIGKILL to the group and cgroup.kill,
// and waits until the leader is reaped and the group and leaf hold no live
// process. Steps with nothing left to signal are skipped. Every signal is
// returned as a SignalRecord with its time. The grace periods belong on
// the launch spec (Spec.Stop): Proc.Shutdown stops a process with them. Reclaim does the same for a
// Leftover recorded by a previous controller, at resume.
//
// # Known races and caveats
//
//   - Group signals after the leader was reaped go member by member (found
//     in /proc by process group and start time). While any member lives the
//     kernel keeps the pgid number allocated, so no new group can take it;
//     a member exiting between the scan and its pidfd_open is caught by the
//     start time check.
//   - kill(-pgid) for a live or zombie leader relies on the leader pinning
//     the pgid; the check and the kill are two calls, and only a leader
//     that is not our child (Reclaim) could be reaped in between; its pgid
//     could then be reused only after every member also exited and the pid
//     space wrapped.
//   - BecomeSubreaper affects the whole process; call it once in main.
//   - Start with a Reaper that is not running is refused; a Proc whose
//     Reaper is closed never sees Done.
//   - Stop's final wait is bounded only by its context: give it a deadline.
//   - Zombies count as gone everywhere: they hold nothing but their pid.
package launch
