package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"warden/pkg/metrics"
)

// TestServe: the listener serves the campaign's metrics at the address it
// logs; stopping closes it and leaves the textfile with the final state.
func TestServe(t *testing.T) {
	s, _ := campaign(t)
	prom := filepath.Join(t.TempDir(), "warden.prom")
	var logs bytes.Buffer
	stop, err := metrics.Serve(context.Background(), metrics.Outputs{Addr: "127.0.0.1:0", Textfile: prom}, s, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	var line struct{ Addr, Message string }
	if err := json.Unmarshal(bytes.TrimSpace(logs.Bytes()), &line); err != nil || line.Message != "serving metrics" || line.Addr == "" {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	resp, err := http.Get("http://" + line.Addr + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), `warden_campaign_info{campaign="m-1"`) {
		t.Fatalf("scrape: HTTP %d\n%s", resp.StatusCode, body)
	}
	stop()
	if _, err := http.Get("http://" + line.Addr + "/"); err == nil {
		t.Error("the listener still answers after stop")
	}
	fams := readTextfile(t, prom)
	if value(t, fams, "warden_campaign_info", map[string]string{"campaign": "m-1"}).GetGauge().GetValue() != 1 {
		t.Fatal("no campaign info in the textfile")
	}
}

// TestServeRefuses: no outputs asked for start nothing; an address off
// the loopback interface is refused before anything listens.
func TestServeRefuses(t *testing.T) {
	s, _ := campaign(t)
	var logs bytes.Buffer
	stop, err := metrics.Serve(context.Background(), metrics.Outputs{}, s, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if logs.Len() != 0 {
		t.Errorf("no outputs, yet it logged: %s", logs.String())
	}
	if _, err := metrics.Serve(context.Background(), metrics.Outputs{Addr: "0.0.0.0:0"}, s, zerolog.New(&logs)); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("a public address: %v", err)
	}
}
