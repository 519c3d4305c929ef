package launch

import (
	"net"
	"os"
	"testing"
	"time"
)

func BenchmarkLookup(b *testing.B) {
	pid := os.Getpid()
	for b.Loop() {
		if _, err := Lookup(pid, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGroupPIDs(b *testing.B) {
	for b.Loop() {
		if _, err := GroupPIDs(os.Getpid()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartReap measures starting a child that exits at once and
// receiving its exit through the reaper.
func BenchmarkStartReap(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	l := &Launcher{Reaper: testReaper}
	spec := Spec{Argv: []string{exe}, Env: append(cleanEnv(), envMode+"=exit3"), CPUs: []int{0}}
	for b.Loop() {
		p, err := l.Start(spec)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(waitLong):
			b.Fatalf("%s not reaped within %v", p, waitLong)
		}
		if p.Exit().Code != 3 {
			b.Fatalf("exit %+v", p.Exit())
		}
	}
}

// BenchmarkListenerPIDs measures the listener gate's look for who holds
// a port: the socket tables and every process's descriptors.
func BenchmarkListenerPIDs(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for b.Loop() {
		if _, err := ListenerPIDs(port); err != nil {
			b.Fatal(err)
		}
	}
}
