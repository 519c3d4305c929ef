package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"

	"warden/pkg/connlimit"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// Server is what the controller gives the handler.
type Server struct {
	Store *state.Store
	Dir   string
	// Controller reports the controller's own pid and last heartbeat.
	Controller func() Controller
	// Stop asks the controller to stop gracefully; it returns at once.
	Stop func()
	// Amend registers an amendment with the running controller (see
	// controller amend) and returns its result as JSON; nil: refused.
	Amend func(AmendRequest) (json.RawMessage, error)
	// Freeze asks the running controller to end its runs and freeze the
	// matrix; it returns at once. nil: refused.
	Freeze func(FreezeRequest) error
	Now    func() time.Time
	// MaxConns bounds the connections open at once on the socket (0:
	// DefaultMaxConns); connections beyond it wait in the backlog.
	MaxConns int
}

// DefaultMaxConns is the socket's connection cap when Server.MaxConns is 0.
const DefaultMaxConns = 64

// Handler serves the API: GET /v1/status, /v1/runs[?state=S], /v1/runs/ID,
// /v1/events[?after=N&limit=M], /v1/report; POST /v1/stop.
func (sv *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		ctl := sv.Controller()
		ctl.Alive = true
		st, err := BuildStatus(sv.Store, sv.Dir, ctl, sv.Now())
		st.Source = "socket"
		reply(w, st, err)
	})
	mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		runs, err := BuildRuns(sv.Store, r.URL.Query().Get("state"))
		reply(w, Runs{Schema: Schema, Runs: runs}, err)
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		d, err := BuildRun(sv.Store, r.PathValue("id"))
		reply(w, d, err)
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit <= 0 || limit > 10000 {
			limit = 1000
		}
		evs, err := sv.Store.Events(after, limit)
		if evs == nil {
			evs = []state.Event{}
		}
		reply(w, Events{Schema: Schema, Events: evs}, err)
	})
	mux.HandleFunc("GET /v1/report", func(w http.ResponseWriter, r *http.Request) {
		ctl := sv.Controller()
		ctl.Alive = true
		rep, err := BuildReport(sv.Store, sv.Dir, ctl, sv.Now())
		rep.Status.Source = "socket"
		reply(w, rep, err)
	})
	mux.HandleFunc("POST /v1/amend", func(w http.ResponseWriter, r *http.Request) {
		if sv.Amend == nil {
			reply(w, nil, errors.New("this controller does not take amendments"))
			return
		}
		q := r.URL.Query()
		out, err := sv.Amend(AmendRequest{Protocol: q.Get("protocol"), ID: q.Get("id"), Reason: q.Get("reason"),
			Readjudicate: q.Get("readjudicate") == "1", Yes: q.Get("yes") == "1", UID: atoi(q.Get("uid"))})
		reply(w, out, err)
	})
	mux.HandleFunc("POST /v1/freeze", func(w http.ResponseWriter, r *http.Request) {
		if sv.Freeze == nil {
			reply(w, nil, errors.New("this controller does not take a freeze"))
			return
		}
		q := r.URL.Query()
		err := sv.Freeze(FreezeRequest{ID: q.Get("id"), Reason: q.Get("reason"), UID: atoi(q.Get("uid"))})
		reply(w, map[string]any{"schema": Schema, "freezing": err == nil}, err)
	})
	mux.HandleFunc("POST /v1/stop", func(w http.ResponseWriter, r *http.Request) {
		sv.Stop()
		reply(w, map[string]any{"schema": Schema, "stopping": true}, nil)
	})
	return mux
}

// Listen serves the API on DIR/ctl.sock, owner-only from its creation (a
// stale socket a dead controller left is replaced), until the returned
// server is closed: at most MaxConns connections at once, each with the
// timeouts of connlimit.Server. An error that ends serving, other than that close,
// goes to onError.
func (sv *Server) Listen(onError func(error)) (*http.Server, error) {
	sock := dirlayout.Socket(sv.Dir)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	max := sv.MaxConns
	if max <= 0 {
		max = DefaultMaxConns
	}
	srv := connlimit.Server(sv.Handler())
	limited := connlimit.Listener(ln, max)
	go func() {
		if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			onError(err)
		}
	}()
	return srv, nil
}

type errorBody struct {
	Error    string `json:"error"`
	NotFound bool   `json:"not_found,omitempty"`
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		nf := errors.Is(err, state.ErrNotFound)
		if nf {
			code = http.StatusNotFound
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(errorBody{Error: err.Error(), NotFound: nf})
		return
	}
	json.NewEncoder(w).Encode(v)
}

// Client talks to a controller through its socket.
type Client struct {
	hc *http.Client
}

// ErrNoController is returned when no controller answers on the socket.
var ErrNoController = errors.New("no controller answers on the socket")

// NewClient returns a client for the campaign in dir. Each request has
// the given timeout.
func NewClient(dir string, timeout time.Duration) *Client {
	sock := dirlayout.Socket(dir)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}
	return &Client{hc: &http.Client{Transport: tr, Timeout: timeout}}
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, out any) error {
	u := "http://controller" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoController, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoController, err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		_ = json.Unmarshal(body, &eb)
		if eb.NotFound {
			return fmt.Errorf("%s: %w", eb.Error, state.ErrNotFound)
		}
		return fmt.Errorf("controller: %s (HTTP %d)", eb.Error, resp.StatusCode)
	}
	return json.Unmarshal(body, out)
}

// Status asks for the status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
	return st, err
}

// Runs lists runs, filtered by state when not empty.
func (c *Client) Runs(ctx context.Context, stateFilter string) ([]RunBrief, error) {
	var out Runs
	q := url.Values{}
	if stateFilter != "" {
		q.Set("state", stateFilter)
	}
	err := c.do(ctx, http.MethodGet, "/v1/runs", q, &out)
	return out.Runs, err
}

// Run is one run's detail.
func (c *Client) Run(ctx context.Context, id string) (RunDetail, error) {
	var d RunDetail
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &d)
	return d, err
}

// Events returns events after the sequence number.
func (c *Client) Events(ctx context.Context, after uint64, limit int) (Events, error) {
	var e Events
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	err := c.do(ctx, http.MethodGet, "/v1/events", q, &e)
	return e, err
}

// Report asks for the campaign report's records.
func (c *Client) Report(ctx context.Context) (Report, error) {
	var r Report
	err := c.do(ctx, http.MethodGet, "/v1/report", nil, &r)
	return r, err
}

// Stop asks the controller to stop gracefully.
func (c *Client) Stop(ctx context.Context) error {
	var out map[string]any
	return c.do(ctx, http.MethodPost, "/v1/stop", nil, &out)
}

// AmendRequest is controller amend's request to a running controller.
type AmendRequest struct {
	Protocol     string // the amended protocol, absolute
	ID, Reason   string
	Readjudicate bool
	Yes          bool // record it; otherwise only the diff
	UID          int  // the operator's uid
}

// FreezeRequest is controller freeze's request to a running controller.
type FreezeRequest struct {
	ID, Reason string
	UID        int
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Amend sends an amendment to the running controller; out receives its
// JSON result.
func (c *Client) Amend(ctx context.Context, req AmendRequest, out any) error {
	q := url.Values{"protocol": {req.Protocol}, "id": {req.ID}, "reason": {req.Reason}, "uid": {strconv.Itoa(req.UID)}}
	if req.Readjudicate {
		q.Set("readjudicate", "1")
	}
	if req.Yes {
		q.Set("yes", "1")
	}
	return c.do(ctx, http.MethodPost, "/v1/amend", q, out)
}

// Freeze asks the running controller to end its runs and freeze the
// matrix; it returns once the controller took the request.
func (c *Client) Freeze(ctx context.Context, req FreezeRequest) error {
	var out map[string]any
	q := url.Values{"id": {req.ID}, "reason": {req.Reason}, "uid": {strconv.Itoa(req.UID)}}
	return c.do(ctx, http.MethodPost, "/v1/freeze", q, &out)
}
