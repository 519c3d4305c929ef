package launch

import (
	"bytes"
	"os"
	"strconv"
)

// Adopted lists the live processes that were reparented to this process
// (it is a child subreaper) and whose environment carries marker, a
// "KEY=value" string: descendants of what this process started that left
// their process group and session, and so are out of reach of a group
// signal when no cgroup contains them. Being our child proves they are
// ours (only descendants are reparented to a subreaper); the marker says
// which attempt they belong to. Zombies are left out: the reaper collects
// them.
func Adopted(boot BootIDSource, marker string) ([]Identity, error) {
	self := os.Getpid()
	want := append([]byte(marker), 0)
	sts, err := scanProcs(func(s procStat) bool { return s.PPID == self && !s.dead() })
	if err != nil {
		return nil, err
	}
	boot = boot.orDefault()
	bootID, err := boot()
	if err != nil {
		return nil, err
	}
	var out []Identity
	for _, s := range sts {
		env, err := os.ReadFile(procRoot + "/" + strconv.Itoa(s.PID) + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			continue
		}
		out = append(out, Identity{PID: s.PID, StartTime: s.StartTime, BootID: bootID})
	}
	return out, nil
}
