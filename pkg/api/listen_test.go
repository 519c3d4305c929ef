package api_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// TestListen: the socket replaces a stale one, is owner-only, serves the
// API (a stop reaches the controller), and answers nothing once closed.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, state.Campaign{ID: "c1", RegimeConcurrency: 2})
	sock := dirlayout.Socket(dir)
	if err := os.WriteFile(sock, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 7, 13, 12, 0, 0, 0, time.UTC)
	stopped := make(chan struct{}, 1)
	sv := &api.Server{Store: s, Dir: dir, Now: func() time.Time { return now },
		Stop:       func() { stopped <- struct{}{} },
		Controller: func() api.Controller { return api.Controller{PID: 4242, Heartbeat: now} }}
	srv, err := sv.Listen(func(err error) { t.Errorf("serving: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want an owner-only socket", fi.Mode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := api.NewClient(dir, 30*time.Second)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Source != "socket" || !st.Controller.Alive || st.Controller.PID != 4242 || st.Campaign.ID != "c1" {
		t.Fatalf("status %+v", st)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("a stop through the socket did not reach the controller")
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx); !errors.Is(err, api.ErrNoController) {
		t.Fatalf("status after close: %v, want ErrNoController", err)
	}
}

// TestListenRefusesADirectory: a directory where the socket goes is not
// a stale socket; it is left and Listen fails.
func TestListenRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	sock := dirlayout.Socket(dir)
	if err := os.MkdirAll(filepath.Join(sock, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	sv := &api.Server{Dir: dir}
	if srv, err := sv.Listen(func(error) {}); err == nil {
		srv.Close()
		t.Fatal("Listen replaced a directory")
	}
	if _, err := os.Stat(filepath.Join(sock, "x")); err != nil {
		t.Fatalf("the directory was touched: %v", err)
	}
}
