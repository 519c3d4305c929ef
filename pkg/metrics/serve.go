package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/api"
	"warden/pkg/connlimit"
	"warden/pkg/state"
)

// Outputs are the opt-in Prometheus outputs of a controller.
type Outputs struct {
	Addr     string // loopback listener, "" for none
	Textfile string // node_exporter textfile, "" for none
	// MaxConns bounds the listener's connections open at once (0:
	// DefaultMaxConns): a loopback port is open to every local user.
	MaxConns int
}

// DefaultMaxConns is the metrics listener's connection cap when
// Outputs.MaxConns is 0.
const DefaultMaxConns = 16

// Serve starts the outputs o asks for: a loopback listener and a textfile
// rewritten every heartbeat interval (and once at the end). The returned
// function stops both and waits for them.
func Serve(ctx context.Context, o Outputs, store *state.Store, log zerolog.Logger) (func(), error) {
	if o.Addr == "" && o.Textfile == "" {
		return func() {}, nil
	}
	reg := Registry(store, time.Now)
	var wg sync.WaitGroup
	var srv *http.Server
	if o.Addr != "" {
		if err := CheckLoopback(o.Addr); err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", o.Addr)
		if err != nil {
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		max := o.MaxConns
		if max <= 0 {
			max = DefaultMaxConns
		}
		srv = connlimit.Server(Handler(reg))
		limited := connlimit.Listener(ln, max)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("metrics server")
			}
		}()
		log.Info().Str("addr", ln.Addr().String()).Msg("serving metrics")
	}
	tctx, cancel := context.WithCancel(ctx)
	if o.Textfile != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(api.HeartbeatInterval)
			defer t.Stop()
			for {
				if err := WriteTextfile(o.Textfile, reg); err != nil {
					log.Warn().Err(err).Str("file", o.Textfile).Msg("metrics textfile")
				}
				select {
				case <-t.C:
				case <-tctx.Done():
					return
				}
			}
		}()
	}
	return func() {
		cancel()
		if srv != nil {
			srv.Close()
		}
		wg.Wait()
		if o.Textfile != "" {
			_ = WriteTextfile(o.Textfile, reg) // the final state
		}
	}, nil
}
