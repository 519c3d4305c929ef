package fakegpu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// procStat returns the state (field 3) and start time (field 22) of pid from
// /proc/PID/stat. The command name (field 2) may hold spaces and
// parentheses, so fields are counted after its last ')'.
func procStat(pid int) (state byte, start uint64, err error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", path, err)
	}
	state, start, err = parseStat(data)
	if err != nil {
		return 0, 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return state, start, nil
}

// parseStat extracts the state and start time from the content of a
// /proc/PID/stat file.
func parseStat(data []byte) (state byte, start uint64, err error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, errors.New("no ')' after the command name")
	}
	fields := bytes.Fields(data[i+1:])
	// fields[0] is field 3 (state), so field 22 (starttime) is fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return 0, 0, fmt.Errorf("%d fields after the command name, want at least 20", len(fields))
	}
	start, err = strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("start time: %w", err)
	}
	return fields[0][0], start, nil
}

// StartTime returns the start time of pid, in clock ticks since boot, as
// recorded in claims.
func StartTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// alive reports whether the process pid with the given start time exists and
// is neither a zombie nor dead.
func alive(pid int, start uint64) bool {
	state, got, err := procStat(pid)
	if err != nil || got != start {
		return false
	}
	return state != 'Z' && state != 'X' && state != 'x'
}
