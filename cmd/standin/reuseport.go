package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"warden/pkg/atomicfile"
)

// vLLM binds its API server's socket itself, before the engine loads,
// with SO_REUSEADDR and SO_REUSEPORT (create_server_socket in
// vllm/entrypoints/openai/api_server.py, commit 0001948bc769; the
// workaround of vllm-project/vllm#8204): any other process of the same
// user may then bind the same address and port and the kernel shares the
// incoming connections between them. --reuse-port binds the stand-in's
// listener the same way, and `standin impostor` is such a process, so
// that the controller's listener gate can be tested against a port joined
// after readiness.

// addReusePortFlag registers --reuse-port.
func addReusePortFlag(f *pflag.FlagSet, on *bool) {
	f.BoolVar(on, "reuse-port", false, "bind the port with SO_REUSEADDR and SO_REUSEPORT, as vLLM's create_server_socket does: a process of the same user may join the port and take a share of its connections")
}

// listenTCP listens on addr, with SO_REUSEPORT when reusePort.
func listenTCP(addr string, reusePort bool) (net.Listener, error) {
	lc := net.ListenConfig{}
	if reusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
					unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
			}); err != nil {
				return err
			}
			return serr
		}
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

// newImpostorCmd is `standin impostor`: a process that joins a port bound
// with SO_REUSEPORT (by `standin server --reuse-port`, or by vLLM) and
// answers every request with 200 and an empty JSON object, until SIGTERM
// or SIGINT. It misbehaves on purpose: it is what the listener gate must
// find while a run measures.
func newImpostorCmd() *cobra.Command {
	var host, readyFile string
	var port int
	cmd := &cobra.Command{
		Use:   "impostor --port PORT",
		Short: "misbehave: join a port bound with SO_REUSEPORT and answer every request 200 (tests only)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if port <= 0 {
				return errors.New("impostor: --port is required")
			}
			ln, err := listenTCP(net.JoinHostPort(host, strconv.Itoa(port)), true)
			if err != nil {
				return fmt.Errorf("impostor: join port %d: %w", port, err)
			}
			log := newLogger("impostor")
			log.Info("joined the port (SO_REUSEPORT); answering every request 200", "port", port)
			srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte("{}"))
			})}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			if readyFile != "" {
				if err := atomicfile.WriteFile(readyFile, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
					srv.Close()
					<-served
					return fmt.Errorf("impostor: ready file: %w", err)
				}
			}
			sig := waitForSignal(syscall.SIGTERM, syscall.SIGINT)
			log.Info("exiting on signal", "signal", sig.String())
			srv.Close()
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "address to join")
	cmd.Flags().IntVar(&port, "port", 0, "port to join")
	cmd.Flags().StringVar(&readyFile, "ready-file", "", "write the port to this file (atomically) once joined")
	return cmd
}
