package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/state"
)

// TestPortImpostor: a server that binds its port late (SGLang binds
// after loading its model; the stand-in with --listen-after never binds
// here) leaves the port free after the preflight gate. Another process
// that takes it answers the readiness probe; the listener gate finds that
// the port's listening socket is not the attempt's server's, and the run
// fails harness-error before any client measures the impostor. The same
// campaign without an impostor passes the gate (the stand-in's own
// socket).
func TestPortImpostor(t *testing.T) {
	t.Parallel()
	t.Run("impostor", func(t *testing.T) {
		t.Parallel()
		never := filepath.Join(t.TempDir(), "never")
		proto := writeProtocol(t, scenario{serverArgs: `, "--listen-after", "` + never + `"`, readyS: "120"})
		ports := slotPorts(t, proto)
		c := newCampaign(t)
		c.startDetached(proto, "auto")
		var port int
		waitFor(t, "the attempt starting its server", 60*time.Second, func() bool {
			for _, cur := range c.liveStatus().Current {
				if cur.State == string(state.Starting) {
					port = ports[cur.Slot]
					return port != 0
				}
			}
			return false
		})
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("take the attempt's port %d: %v", port, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })}
		go srv.Serve(ln)
		defer srv.Close()
		c.waitExit()

		s := c.store()
		defer s.Close()
		a := c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonHarnessError)[0]
		v := c.gateVerdict(s, "p1.saturation", "listener")
		if v.Verdict != state.VerdictFail || !strings.Contains(v.Detail, "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(v.Detail, "impostor") {
			t.Fatalf("listener gate %s %q, want a fail naming pid %d", v.Verdict, v.Detail, os.Getpid())
		}
		evs, err := s.Events(0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		said := false
		for _, e := range evs {
			if e.Run != "p1.saturation" || e.Attempt != a.N {
				continue
			}
			if e.To == string(state.Ready) || e.To == string(state.Measuring) {
				t.Fatalf("the attempt went %s with an impostor on its port", e.To)
			}
			said = said || (e.To == string(state.Failed) && strings.Contains(e.Message, "impostor"))
		}
		if !said {
			t.Fatal("the attempt's failure does not say that an impostor held the port")
		}
		c.stoppedFor(s, state.ReasonHarnessError)
		c.assertNoProcesses()
	})
	t.Run("own-server", func(t *testing.T) {
		t.Parallel()
		c := newCampaign(t)
		c.runForeground(writeProtocol(t, scenario{}))
		s := c.store()
		defer s.Close()
		c.soleAttempt(s, "p1.saturation", state.Complete)
		if v := c.gateVerdict(s, "p1.saturation", "listener"); v.Verdict != state.VerdictPass || v.Figures["listeners"] < 1 {
			t.Fatalf("listener gate of the campaign's own server: %s %q %v", v.Verdict, v.Detail, v.Figures)
		}
	})
}

// slotPorts reads the slots' ports from a protocol writeProtocol wrote.
func slotPorts(t *testing.T, proto string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(proto)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`\{name: (s\d), gpus: \[\d\], cpus: "\d", port: (\d+)\}`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(out) == 0 {
		t.Fatalf("no slot ports in %s", proto)
	}
	return out
}
