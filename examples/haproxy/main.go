// Command haproxy is an example receiver of sonde's event webhooks that
// drives HAProxy: for every route event of a pool it sets the matching
// HAProxy server's state through the runtime API, "ready" when sonde routes
// the target and "maint" (or "drain") when the pool policy removes it. HAProxy
// then sends traffic exactly where sonde's pool decisions say, P1 cap and P2
// fail-open included, with no health checks of its own.
//
// Servers are found by address: a target 10.0.0.7:8080 of pool api is the
// server of backend api (or the backend -backend maps the pool to) whose
// address and port are 10.0.0.7 and 8080, as "show servers state" lists
// them. At start, and whenever a batch says events were lost, the receiver
// reads every target's route from sonde's API before following events again.
//
//	haproxy -listen 127.0.0.1:9124 -secret-file hook.secret \
//	    -socket /run/haproxy/admin.sock -sonde http://127.0.0.1:9123 -backend api=be_api
//
// with, in sonde's configuration,
//
//	webhooks:
//	  - url: http://127.0.0.1:9124/
//	    secret_file: hook.secret
//	    events: {kinds: [route]}
//
// and, in HAProxy's, a stats socket at level admin.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sondeprobe/sonde/server/web/api"
	"github.com/sondeprobe/sonde/server/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "haproxy:", err)
		os.Exit(1)
	}
}

// backends maps sonde pools to HAProxy backends: -backend POOL=BACKEND.
type backends map[string]string

func (b backends) String() string { return fmt.Sprint(map[string]string(b)) }

func (b backends) Set(v string) error {
	pool, be, ok := strings.Cut(v, "=")
	if !ok || pool == "" || be == "" {
		return fmt.Errorf("%q: want POOL=BACKEND", v)
	}
	b[pool] = be
	return nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("haproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9124", "`address` to receive webhooks on")
	var o options
	o.backends = backends{}
	fs.StringVar(&o.socket, "socket", "/run/haproxy/admin.sock", "HAProxy's runtime API `socket` (stats socket at level admin)")
	fs.StringVar(&o.sonde, "sonde", "http://127.0.0.1:9123", "sonde's `URL`, to read every target's route at start and after lost events")
	secretFile := fs.String("secret-file", "", "`file` holding the webhook secret; requests without its signature are refused")
	fs.StringVar(&o.removed, "removed", "maint", "HAProxy `state` of a removed target: maint or drain")
	fs.Var(o.backends, "backend", "`POOL=BACKEND`: the HAProxy backend of a sonde pool (default: the pool's name); repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *secretFile != "" {
		var err error
		if o.secret, err = webhook.ReadSecret(ctx, *secretFile); err != nil {
			return err
		}
	}
	o.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	rl, err := newRelay(o)
	if err != nil {
		return err
	}
	if err := rl.resync(ctx); err != nil {
		o.log.Warn("initial sync from sonde failed; following events", "err", err)
	}
	srv := &http.Server{Addr: *listen, Handler: rl, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	o.log.Info("receiving sonde webhooks", "listen", *listen, "socket", o.socket)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// options configure a relay.
type options struct {
	socket   string   // HAProxy runtime API socket
	sonde    string   // sonde's base URL
	secret   []byte   // webhook secret; nil accepts unsigned requests
	removed  string   // state of removed targets: maint or drain
	backends backends // pool → backend
	log      *slog.Logger
}

// relay turns sonde's route events into HAProxy runtime API commands. It
// handles one batch at a time, so commands keep sonde's order.
type relay struct {
	o  options
	mu sync.Mutex
}

func newRelay(o options) (*relay, error) {
	if o.removed != "maint" && o.removed != "drain" {
		return nil, fmt.Errorf("-removed %q: want maint or drain", o.removed)
	}
	return &relay{o: o}, nil
}

// ServeHTTP handles one webhook request. It answers 503 when HAProxy could
// not be told, so sonde sends the batch again.
func (rl *relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rl.o.secret != nil && !webhook.Verify(rl.o.secret, body, r.Header.Get(webhook.SignatureHeader)) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var b api.HookBatch
	if err := json.Unmarshal(body, &b); err != nil {
		http.Error(w, "bad batch: "+err.Error(), http.StatusBadRequest)
		return
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for _, e := range b.Events {
		if e.Kind != "route" || len(e.Pools) != 1 {
			continue
		}
		if err := rl.apply(r.Context(), e.Pools[0], e.Target, e.To); err != nil {
			rl.o.log.Error("haproxy refused an update; sonde will send the batch again", "seq", e.Seq, "err", err)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	if b.Lost > 0 {
		if err := rl.resync(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
}

// apply sets the HAProxy server of target in pool's backend to the state of
// route. Pending targets (not decided yet) are left as they are.
func (rl *relay) apply(ctx context.Context, pool, target, route string) error {
	var state string
	switch route {
	case "routed":
		state = "ready"
	case "removed", "excluded":
		state = rl.o.removed
	default:
		return nil
	}
	be := rl.o.backends[pool]
	if be == "" {
		be = pool
	}
	srv, err := rl.server(ctx, be, target)
	if err != nil {
		return err
	}
	if srv == "" {
		rl.o.log.Warn("no HAProxy server for target", "backend", be, "target", target)
		return nil
	}
	out, err := rl.command(ctx, fmt.Sprintf("set server %s/%s state %s", be, srv, state))
	if err != nil {
		return err
	}
	if msg := strings.TrimSpace(out); msg != "" {
		return fmt.Errorf("set server %s/%s state %s: %s", be, srv, state, msg)
	}
	rl.o.log.Info("server state set", "backend", be, "server", srv, "target", target, "state", state)
	return nil
}

// server returns the name of the server of backend be at address target
// (host:port), "" when it has none.
func (rl *relay) server(ctx context.Context, be, target string) (string, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return "", fmt.Errorf("target %q: %w", target, err)
	}
	servers, err := rl.servers(ctx, be)
	if err != nil {
		return "", err
	}
	for _, s := range servers {
		if s["srv_addr"] == host && s["srv_port"] == port {
			return s["srv_name"], nil
		}
	}
	return "", nil
}

// servers returns the servers of backend be as "show servers state" lists
// them, each a map from column name (srv_name, srv_addr, srv_port,
// srv_admin_state, …) to value. A backend HAProxy does not have has none.
func (rl *relay) servers(ctx context.Context, be string) ([]map[string]string, error) {
	out, err := rl.command(ctx, "show servers state "+be)
	if err != nil {
		return nil, err
	}
	// "1", then "# be_id be_name srv_id srv_name srv_addr …", then one
	// line per server.
	var cols []string
	var servers []map[string]string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "#":
			cols = f[1:]
		case cols != nil && len(f) == len(cols):
			s := make(map[string]string, len(cols))
			for i, c := range cols {
				s[c] = f[i]
			}
			servers = append(servers, s)
		}
	}
	if cols == nil { // "Can't find backend."
		rl.o.log.Warn("HAProxy has no such backend", "backend", be, "answer", strings.TrimSpace(out))
	}
	return servers, nil
}

// command runs one runtime API command and returns HAProxy's answer.
func (rl *relay) command(ctx context.Context, cmd string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", rl.o.socket)
	if err != nil {
		return "", fmt.Errorf("haproxy runtime API: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", fmt.Errorf("haproxy runtime API: %w", err)
	}
	out, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("haproxy runtime API: %w", err)
	}
	return string(out), nil
}

// resync reads every target's route from sonde's API, a page at a time
// (following next), and applies it. A cursor outlives sonde's reloads that
// keep the pools; a page answered 410 (the pools changed, or sonde
// restarted, meanwhile) starts the listing again.
func (rl *relay) resync(ctx context.Context) error {
	for after, restarts := "", 0; ; {
		q := url.Values{"limit": {"1000"}, "after": {after}}
		var page api.TargetsPage
		err := getJSON(ctx, rl.o.sonde+"/api/v1/targets?"+q.Encode(), &page)
		if errors.Is(err, errGone) && restarts < 3 {
			after, restarts = "", restarts+1
			continue
		}
		if err != nil {
			return err
		}
		for _, t := range page.Targets {
			if err := rl.apply(ctx, t.Pool, t.Target, t.Route); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

// errGone is returned by getJSON for 410 Gone: a paging cursor from before
// a change of sonde's pools or a restart.
var errGone = errors.New("gone")

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("sonde API: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return json.NewDecoder(resp.Body).Decode(v)
	case http.StatusGone:
		return fmt.Errorf("sonde API: GET %s: %w", u, errGone)
	}
	return fmt.Errorf("sonde API: GET %s: %s", u, resp.Status)
}
