package gates

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestReadHostRecordLive(t *testing.T) {
	own := os.Getuid()
	other := own + 424242 // a uid no process here has
	self, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	comm := strings.TrimSpace(string(self))

	r, err := ReadHostRecord(own)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []float64{r.LoadAvg1, r.LoadAvg5, r.LoadAvg15} {
		if l < 0 || math.IsNaN(l) || math.IsInf(l, 0) || l > 1e5 {
			t.Fatalf("implausible load average %v", r)
		}
	}
	for _, p := range r.OtherUsersProcs {
		if p.UID == own || p.PID == os.Getpid() {
			t.Fatalf("own process listed as another user's: %+v", p)
		}
	}
	if r.OtherUsersCount < len(r.OtherUsersProcs) || len(r.OtherUsersProcs) > MaxOtherProcs {
		t.Fatalf("count %d, listed %d", r.OtherUsersCount, len(r.OtherUsersProcs))
	}

	// Seen from a uid that owns nothing, this test's process is another
	// user's. The unbounded scan is used so a busy host cannot push it
	// past the bound.
	r, err = readHostRecord("/proc", other, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range r.OtherUsersProcs {
		if p.PID == os.Getpid() {
			found = p.UID == own && p.Comm == comm
		}
	}
	if !found {
		t.Fatalf("pid %d (uid %d, %s) not among %d processes of other users", os.Getpid(), own, comm, len(r.OtherUsersProcs))
	}
	if r, err := ReadHostRecord(other); err != nil || len(r.OtherUsersProcs) == 0 {
		t.Fatalf("ReadHostRecord(%d): %d processes, %v", other, len(r.OtherUsersProcs), err)
	}
}

// fakeProc builds a /proc-like tree.
func fakeProc(t *testing.T, loadavg string, procs map[string][3]string) string {
	t.Helper()
	root := t.TempDir()
	if loadavg != "" {
		if err := os.WriteFile(filepath.Join(root, "loadavg"), []byte(loadavg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for pid, files := range procs {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"status", "comm", "stat"} {
			if files[i] == "-" {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(files[i]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func status(uid int) string {
	return "Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t" + strconv.Itoa(uid) + "\t" + strconv.Itoa(uid) + "\t0\t0\nGid:\t0\t0\t0\t0\n"
}

func stat(pid string, comm string, flags int) string {
	return pid + " (" + comm + ") S 1 1 1 0 -1 " + strconv.Itoa(flags) + " 0 0 0 0"
}

func TestReadHostRecordFake(t *testing.T) {
	procs := map[string][3]string{
		"1":    {status(0), "systemd\n", stat("1", "systemd", 0x400100)},
		"2":    {status(0), "kthreadd\n", stat("2", "kthreadd", 0x208040)},
		"9":    {status(1001), "python3\n", stat("9", "python3", 0x400000)},
		"10":   {status(1000), "vllm\n", stat("10", "vllm", 0x400000)},
		"100":  {status(1002), "weird) name\n", stat("100", "weird) name", 0x400000)},
		"200":  {"", "-", "-"}, // exited between listing and reading
		"300":  {"-", "-", "-"},
		"1000": {status(1003), "-", stat("1000", "nocomm", 0)},
		"self": {status(1000), "x", "-"},
	}
	root := fakeProc(t, "1.25 0.50 0.10 2/345 6789\n", procs)
	cases := []struct {
		name    string
		ownUID  int
		max     int
		pids    []int
		count   int
		comm100 string
	}{
		{"other users, all", 1000, 10, []int{1, 9, 100, 1000}, 4, "weird) name"},
		{"bounded", 1000, 2, []int{1, 9}, 4, ""},
		{"root sees others", 0, 10, []int{9, 10, 100, 1000}, 4, "weird) name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := readHostRecord(root, c.ownUID, c.max)
			if err != nil {
				t.Fatal(err)
			}
			if r.LoadAvg1 != 1.25 || r.LoadAvg5 != 0.5 || r.LoadAvg15 != 0.1 {
				t.Errorf("load %v %v %v", r.LoadAvg1, r.LoadAvg5, r.LoadAvg15)
			}
			var got []int
			for _, p := range r.OtherUsersProcs {
				got = append(got, p.PID)
				if p.PID == 100 && p.Comm != c.comm100 {
					t.Errorf("pid 100 comm %q", p.Comm)
				}
				if p.PID == 9 && (p.UID != 1001 || p.Comm != "python3") {
					t.Errorf("pid 9: %+v", p)
				}
			}
			if len(got) != len(c.pids) || r.OtherUsersCount != c.count {
				t.Fatalf("pids %v count %d, want %v count %d", got, r.OtherUsersCount, c.pids, c.count)
			}
			for i := range got {
				if got[i] != c.pids[i] {
					t.Fatalf("pids %v, want %v", got, c.pids)
				}
			}
		})
	}

	for name, tree := range map[string]string{
		"no loadavg":  fakeProc(t, "", nil),
		"bad loadavg": fakeProc(t, "1.0 x 2.0 1/2 3\n", nil),
		"short":       fakeProc(t, "1.0 2.0\n", nil),
		"no Uid line": fakeProc(t, "1 1 1 1/1 1\n", map[string][3]string{"5": {"Name:\tx\n", "x", "-"}}),
	} {
		if _, err := readHostRecord(tree, 0, 10); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
