package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	phttp "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/probe/tcp"
	"github.com/sondeprobe/sonde/server"
)

// probeConcurrency bounds the probes "sonde probe" runs at once.
const probeConcurrency = 64

const probeUsage = `Usage: sonde probe [flags] URL...

Probes every URL once, concurrently, and prints one line per URL in the order
given: target, protocol, outcome, latency, status and, for a failure, why.
URL is one of
  tcp://HOST:PORT       TCP handshake (connect() prober)
  connect://HOST:PORT   TCP handshake with the connect() prober
  syn://HOST:PORT       raw SYN, reply caught by eBPF: SYN-ACK, RST or ICMP
                        unreachable (needs CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN)
  http://HOST[:PORT][/PATH][?QUERY]
  https://HOST[:PORT][/PATH][?QUERY]
The URL's path and query are the request path; its host is resolved (see
-ip-family) and is the default Host header and TLS server name. HTTP flags
apply to http:// and https:// URLs only, TLS flags to https:// only.
Settings come from -preset (or sonde's defaults) with the flags on top, and
are validated like a check in a config file.

Exit status: 0 when every target is healthy, 1 when any is not, 2 for bad
usage or settings.

Flags:
`

// probeFlags are the parsed flags of "sonde probe".
type probeFlags struct {
	preset    string
	method    string
	status    string
	body      string
	host      string
	sni       string
	userAgent string
	headers   headerFlag        // as given
	headerMap map[string]string // parsed, canonical names
	timeout   time.Duration
	json      bool
	insecure  bool
	caFile    string
	source    string
	ipFamily  string

	set map[string]bool // names of the flags given on the command line
}

// headerFlag collects repeated -header NAME:VALUE flags.
type headerFlag []string

func (h *headerFlag) String() string { return strings.Join(*h, ", ") }

func (h *headerFlag) Set(v string) error {
	*h = append(*h, v)
	return nil
}

// Flags that only make sense for some schemes; given with no URL of that
// kind, they are a usage error.
var (
	probeHTTPFlags  = []string{"method", "status", "body", "host", "user-agent", "header"}
	probeHTTPSFlags = []string{"sni", "ca-file", "insecure"}
)

// probeJob is one URL of the command line with everything needed to probe it.
type probeJob struct {
	arg     string          // the URL as given
	proto   config.Protocol // from the scheme
	tcpMode string          // tcp_mode for the config: "" (auto), "connect"
	host    string          // the URL's host without brackets
	port    uint16
	path    string // request path and query (HTTP)

	check  *config.Check  // effective settings, after config validation
	prober probe.Reporter // shared by the jobs of one check
}

// probeOutcome is the result of one job.
type probeOutcome struct {
	addr netip.AddrPort // where the probe went; invalid when resolution failed
	rep  probe.Report
}

// runProbe runs "sonde probe". It returns a usage error (exit 2) for bad
// flags, URLs or settings, silentExit(1) when a target is unhealthy, and nil
// when every target is healthy.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runProbeWith(ctx, args, stdout, stderr, probe.Resolver{})
}

// runProbeWith is runProbe with the resolver of the URLs' host names.
func runProbeWith(ctx context.Context, args []string, stdout, stderr io.Writer, res probe.Resolver) error {
	f, urls, err := parseProbeFlags(args, stderr)
	if err != nil {
		return err
	}
	jobs := make([]*probeJob, 0, len(urls))
	for _, arg := range urls {
		j, err := parseProbeURL(arg)
		if err != nil {
			return usageError(err)
		}
		jobs = append(jobs, j)
	}
	if err := f.checkApplicable(jobs); err != nil {
		return usageError(err)
	}
	if err := resolveProbeChecks(ctx, f, jobs); err != nil {
		return err
	}
	if err := newProbeProbers(jobs); err != nil {
		return usageError(err)
	}
	closeSyn, err := newSynProber(ctx, jobs, res)
	if err != nil {
		return err
	}
	defer closeSyn()

	out := newProbeWriter(stdout, f.json)
	healthy := true
	for i, o := range probeAll(ctx, jobs, res) {
		healthy = healthy && o.rep.Outcome.Healthy()
		if err := out.write(jobs[i], o); err != nil {
			return fmt.Errorf("probe: write result: %w", err)
		}
	}
	if err := out.flush(); err != nil {
		return fmt.Errorf("probe: write results: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("probe: interrupted: %w", err)
	}
	if !healthy {
		return silentExit(exitFailure)
	}
	return nil
}

// parseProbeFlags parses the flags and returns the URLs.
func parseProbeFlags(args []string, stderr io.Writer) (*probeFlags, []string, error) {
	f := &probeFlags{set: make(map[string]bool)}
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, probeUsage); fs.PrintDefaults() }
	fs.StringVar(&f.preset, "preset", "", "apply the defaults of a `preset`: appservice, frontdoor, appgateway or globalaccelerator")
	fs.StringVar(&f.method, "method", "", "HTTP `method`, GET or HEAD (default GET, HEAD with -preset frontdoor)")
	fs.StringVar(&f.status, "status", "", "healthy status `codes`, such as 200-399,403 (default 200-299 or the preset's)")
	fs.StringVar(&f.body, "body", "", "`text` the response body must contain")
	fs.StringVar(&f.host, "host", "", "Host header (default: the URL's host and port)")
	fs.StringVar(&f.sni, "sni", "", "TLS server `name` (default: the host of the Host header)")
	fs.StringVar(&f.userAgent, "user-agent", "", "User-Agent header (default sonde's, or the preset's)")
	fs.Var(&f.headers, "header", "extra request header `NAME:VALUE` (repeatable)")
	fs.DurationVar(&f.timeout, "timeout", 0, "per-probe timeout (default 3s, or the preset's)")
	fs.BoolVar(&f.json, "json", false, `print one JSON object per target: {"target","protocol","outcome","healthy","latency_seconds","status",...}`)
	fs.BoolVar(&f.insecure, "insecure", false, "accept any TLS server certificate")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM `file` of the CA certificates that verify servers (default: the system's)")
	fs.StringVar(&f.source, "source", "", "source `IP` address of the probes")
	fs.StringVar(&f.ipFamily, "ip-family", "any", "address `family` of host names: ip4, ip6 or any (IPv4 first)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, silentExit(exitOK)
		}
		return nil, nil, usageError(err)
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, probeUsage)
		return nil, nil, usageError(errors.New("probe: no URL to probe"))
	}
	if f.caFile != "" && f.insecure {
		return nil, nil, usageError(errors.New("probe: -ca-file has no effect with -insecure; give one of them"))
	}
	var err error
	if f.headerMap, err = parseProbeHeaders(f.headers); err != nil {
		return nil, nil, usageError(err)
	}
	return f, fs.Args(), nil
}

// parseProbeURL checks one URL argument and splits it into a job.
func parseProbeURL(arg string) (*probeJob, error) {
	u, err := url.Parse(arg)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("probe: URL %q: %w", arg, err)
	}
	j := &probeJob{arg: arg}
	var ok bool
	if j.proto, j.tcpMode, ok = probeScheme(u.Scheme); !ok {
		return nil, fmt.Errorf("probe: URL %q: scheme %q is not one of tcp, connect, syn, http, https", arg, u.Scheme)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("probe: URL %q: %s", arg, fmt.Sprintf(format, args...))
	}
	switch {
	case u.Opaque != "" || u.Hostname() == "":
		if j.proto == config.TCP {
			return nil, bad("missing host; want %s://HOST:PORT", u.Scheme)
		}
		return nil, bad("missing host; want %s://HOST[:PORT][/PATH]", u.Scheme)
	case u.User != nil:
		return nil, bad("user information is not supported")
	}
	j.host = u.Hostname()
	switch p := u.Port(); {
	case p != "":
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, bad("port %q is out of range 1..65535", p)
		}
		j.port = uint16(n)
	case j.proto == config.TCP:
		return nil, bad("missing port; want %s://HOST:PORT", u.Scheme)
	case j.proto == config.HTTPS:
		j.port = 443
	default:
		j.port = 80
	}
	if j.proto == config.TCP {
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery {
			return nil, bad("a %s target has no path or query", u.Scheme)
		}
		return j, nil
	}
	j.path = u.RequestURI()
	return j, nil
}

// probeScheme maps a URL scheme to the protocol and tcp_mode of its check.
// A scheme for another TCP prober is one more case here and one in
// [tcpProberFor].
func probeScheme(scheme string) (proto config.Protocol, tcpMode string, ok bool) {
	switch scheme {
	case "tcp":
		return config.TCP, "", true // auto: tcpProberFor picks the prober
	case "connect":
		return config.TCP, "connect", true
	case "syn":
		return config.TCP, "syn", true
	case "http":
		return config.HTTP, "", true
	case "https":
		return config.HTTPS, "", true
	}
	return 0, "", false
}

// checkApplicable rejects HTTP or TLS flags given without any URL they
// apply to: they would silently do nothing.
func (f *probeFlags) checkApplicable(jobs []*probeJob) error {
	var hasHTTP, hasHTTPS bool
	for _, j := range jobs {
		hasHTTP = hasHTTP || j.proto != config.TCP
		hasHTTPS = hasHTTPS || j.proto == config.HTTPS
	}
	for _, name := range probeHTTPFlags {
		if f.set[name] && !hasHTTP {
			return fmt.Errorf("probe: -%s applies to http:// and https:// URLs, and none is given", name)
		}
	}
	for _, name := range probeHTTPSFlags {
		if f.set[name] && !hasHTTPS {
			return fmt.Errorf("probe: -%s applies to https:// URLs, and none is given", name)
		}
	}
	return nil
}

// checkSpec returns the config entry of a check that probes j with f's
// settings. Only settings given on the command line are written, so the
// preset (or sonde's defaults) supplies the rest.
func (f *probeFlags) checkSpec(j *probeJob) map[string]any {
	s := map[string]any{"protocol": j.proto.String()}
	setIf := func(flagName, key string, v any) {
		if f.set[flagName] {
			s[key] = v
		}
	}
	setIf("preset", "preset", f.preset)
	setIf("timeout", "timeout", f.timeout.String())
	setIf("source", "source_address", f.source)
	setIf("ip-family", "ip_family", f.ipFamily)
	if j.proto == config.TCP {
		if j.tcpMode != "" {
			s["tcp_mode"] = j.tcpMode
		}
		return s
	}
	s["path"] = j.path
	setIf("method", "method", f.method)
	setIf("status", "healthy_status", f.status)
	setIf("body", "body_contains", f.body)
	setIf("host", "host", f.host)
	setIf("user-agent", "user_agent", f.userAgent)
	if len(f.headerMap) > 0 {
		s["headers"] = f.headerMap
	}
	if j.proto == config.HTTPS {
		setIf("sni", "sni", f.sni)
		tls := map[string]any{}
		if f.caFile != "" {
			tls["ca_file"] = f.caFile
		}
		if f.insecure {
			tls["insecure_skip_verify"] = true
		}
		if len(tls) > 0 {
			s["tls"] = tls
		}
	}
	return s
}

// parseProbeHeaders parses -header NAME:VALUE values; the config
// validates names and values.
func parseProbeHeaders(hs []string) (map[string]string, error) {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("probe: -header %q: want NAME:VALUE", h)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if _, dup := m[canon]; dup {
			return nil, fmt.Errorf("probe: -header %q: header %s is given more than once", h, canon)
		}
		m[canon] = strings.TrimSpace(value)
	}
	return m, nil
}

// resolveProbeChecks validates the settings of every job the way a config
// file is validated: it writes one check per distinct setting (with a
// placeholder pool, as a config needs one), parses it with [config.Parse]
// and gives each job its effective check. A config error becomes a usage
// error naming the flag or URL at fault.
func resolveProbeChecks(ctx context.Context, f *probeFlags, jobs []*probeJob) error {
	type group struct {
		name string
		jobs []*probeJob
	}
	checks := map[string]any{}
	var pools []any
	byKey := map[string]*group{}
	var groups []*group
	for _, j := range jobs {
		spec := f.checkSpec(j)
		b, err := json.Marshal(spec)
		if err != nil {
			return fmt.Errorf("probe: encode check: %w", err)
		}
		g := byKey[string(b)]
		if g == nil {
			g = &group{name: "url" + strconv.Itoa(len(groups)+1)}
			byKey[string(b)] = g
			groups = append(groups, g)
			checks[g.name] = spec
			pools = append(pools, map[string]any{"name": g.name, "check": g.name, "targets": []string{"127.0.0.1:1"}})
		}
		g.jobs = append(g.jobs, j)
	}
	// JSON is YAML: config.Parse reads it like a file.
	data, err := json.Marshal(map[string]any{"checks": checks, "pools": pools})
	if err != nil {
		return fmt.Errorf("probe: encode config: %w", err)
	}
	cfg, err := config.Parse(data, "", config.LoadOptions{Context: ctx})
	if err != nil {
		firstURL := map[string]string{}
		for _, g := range groups {
			firstURL[g.name] = g.jobs[0].arg
		}
		return usageError(probeConfigError(err, firstURL))
	}
	for _, g := range groups {
		c := cfg.CheckByName(g.name)
		if c == nil {
			return fmt.Errorf("probe: check %s missing from its config", g.name) // a bug
		}
		for _, j := range g.jobs {
			j.check = c
		}
	}
	return nil
}

// probeFieldFlags names the flag behind each check field a flag sets.
var probeFieldFlags = map[string]string{
	"preset":                   "-preset",
	"method":                   "-method",
	"healthy_status":           "-status",
	"body_contains":            "-body",
	"max_body_bytes":           "-body",
	"host":                     "-host",
	"sni":                      "-sni",
	"user_agent":               "-user-agent",
	"headers":                  "-header",
	"timeout":                  "-timeout",
	"tls":                      "-ca-file",
	"tls.ca_file":              "-ca-file",
	"tls.insecure_skip_verify": "-insecure",
	"source_address":           "-source",
	"ip_family":                "-ip-family",
}

// probeURLFields are the check fields that come from a URL.
var probeURLFields = map[string]string{
	"protocol": "scheme",
	"tcp_mode": "scheme",
	"path":     "path",
	"port":     "port",
}

// probeSettingError is a config error in a setting of "sonde probe": Where
// names the flag or the URL it came from.
type probeSettingError struct {
	Where string
	Err   *config.FieldError
}

func (e *probeSettingError) Error() string { return "probe: " + e.Where + ": " + e.Err.Msg }
func (e *probeSettingError) Unwrap() error { return e.Err }

// probeConfigError rewrites a config error about field "checks.NAME.FIELD"
// to name the flag or URL (firstURL[NAME]) the field came from.
func probeConfigError(err error, firstURL map[string]string) error {
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		return fmt.Errorf("probe: %w", err)
	}
	rest, ok := strings.CutPrefix(fe.Field, "checks.")
	if !ok {
		return fmt.Errorf("probe: %w", err)
	}
	name, field, _ := strings.Cut(rest, ".")
	if fl, ok := probeFieldFlags[field]; ok {
		return &probeSettingError{Where: fl, Err: fe}
	}
	if h, ok := strings.CutPrefix(field, "headers."); ok {
		return &probeSettingError{Where: "-header " + h, Err: fe}
	}
	if part, ok := probeURLFields[field]; ok {
		return &probeSettingError{Where: fmt.Sprintf("URL %q (%s)", firstURL[name], part), Err: fe}
	}
	return fmt.Errorf("probe: %w", err)
}

// newProbeProbers gives every job its prober, one per check. syn:// jobs get
// theirs from newSynProber.
func newProbeProbers(jobs []*probeJob) error {
	probers := map[*config.Check]probe.Reporter{}
	for _, j := range jobs {
		if j.check.Protocol == config.TCP && j.check.TCPMode == config.TCPSyn {
			continue
		}
		p, ok := probers[j.check]
		if !ok {
			var err error
			if p, err = proberFor(j.check); err != nil {
				return fmt.Errorf("probe: %s: %w", j.arg, err)
			}
			probers[j.check] = p
		}
		j.prober = p
	}
	return nil
}

// proberFor returns a prober for check c.
func proberFor(c *config.Check) (probe.Reporter, error) {
	if c.Protocol == config.TCP {
		return tcpProberFor(c)
	}
	o, err := server.HTTPOptions(c)
	if err != nil {
		return nil, err
	}
	return phttp.New(o)
}

// tcpProberFor returns the connect() prober of tcp:// and connect:// URLs.
// A single probe gains nothing from the SYN prober, so tcp:// uses connect()
// and needs no privileges; syn:// asks for raw SYNs (newSynProber).
func tcpProberFor(c *config.Check) (probe.Reporter, error) {
	switch c.TCPMode {
	case config.TCPAuto, config.TCPConnect:
		return tcp.New(tcp.Options{Source: c.SourceAddress}), nil
	}
	return nil, fmt.Errorf("tcp_mode %s is not supported by sonde probe", c.TCPMode)
}

// newSynProber starts one SYN prober for every syn:// job. The prober must
// know its endpoints up front, so their host names are resolved here (a name
// that fails to resolve fails again, with its error, when the job runs). It
// returns a function that closes the prober.
func newSynProber(ctx context.Context, jobs []*probeJob, res probe.Resolver) (func(), error) {
	var synJobs []*probeJob
	var eps []netip.AddrPort
	for _, j := range jobs {
		if j.check.Protocol != config.TCP || j.check.TCPMode != config.TCPSyn {
			continue
		}
		synJobs = append(synJobs, j)
		rctx, cancel := context.WithTimeout(ctx, j.check.Timeout)
		addr, err := res.Resolve(rctx, j.host, j.check.IPFamily.String())
		cancel()
		if err == nil {
			eps = append(eps, netip.AddrPortFrom(addr, j.port))
		}
	}
	if len(synJobs) == 0 {
		return func() {}, nil
	}
	o, err := syn.NewOneShot(eps, syn.Config{})
	if err != nil {
		if errors.Is(err, syn.ErrNoRawSocket) {
			return nil, fmt.Errorf("probe: syn:// sends raw SYNs and needs CAP_NET_RAW (root, or setcap cap_net_raw,cap_bpf,cap_net_admin+ep on sonde); tcp:// probes with connect() without privileges: %w", err)
		}
		return nil, fmt.Errorf("probe: start the SYN prober: %w", err)
	}
	for _, j := range synJobs {
		j.prober = o
	}
	return func() { _ = o.Close() }, nil
}

// probeAll probes every job, at most probeConcurrency at once, and yields
// the outcomes in the order of jobs as they become available. When ctx is
// done, jobs not started yet end with an Error outcome at once.
func probeAll(ctx context.Context, jobs []*probeJob, res probe.Resolver) iter.Seq2[int, probeOutcome] {
	return func(yield func(int, probeOutcome) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // the consumer stopped early: stop launching
		outs := make([]probeOutcome, len(jobs))
		done := make([]chan struct{}, len(jobs))
		for i := range done {
			done[i] = make(chan struct{})
		}
		go func() {
			sem := make(chan struct{}, probeConcurrency)
			for i, j := range jobs {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					outs[i] = probeOutcome{rep: probe.Report{
						Result: probe.Result{Outcome: probe.Error},
						Err:    fmt.Errorf("not probed: %w", ctx.Err()),
					}}
					close(done[i])
					continue
				}
				go func() {
					defer func() { <-sem }()
					outs[i] = j.run(ctx, res)
					close(done[i])
				}()
			}
		}()
		for i := range jobs {
			<-done[i]
			if !yield(i, outs[i]) {
				return
			}
		}
	}
}

// run resolves the job's host and probes it once. The check's timeout
// bounds the resolution and, separately, the probe.
func (j *probeJob) run(ctx context.Context, res probe.Resolver) probeOutcome {
	rctx, cancel := context.WithTimeout(ctx, j.check.Timeout)
	addr, err := res.Resolve(rctx, j.host, j.check.IPFamily.String())
	cancel()
	if err != nil {
		return probeOutcome{rep: probe.Report{Result: probe.Result{Outcome: probe.Error}, Err: err}}
	}
	t := probe.Target{Addr: addr, Port: j.port}
	if _, err := netip.ParseAddr(j.host); err != nil {
		t.Host = j.host // a name: the Host header and SNI default
	}
	pctx, cancel := context.WithTimeout(ctx, j.check.Timeout)
	defer cancel()
	return probeOutcome{addr: netip.AddrPortFrom(addr, j.port), rep: j.prober.Report(pctx, t)}
}

// failureText says why a probe failed, with what was expected where the
// prober's error does not say it.
func (j *probeJob) failureText(r probe.Report) string {
	if r.Outcome.Healthy() {
		return ""
	}
	msg := r.Outcome.String()
	if r.Err != nil {
		msg = r.Err.Error()
	}
	c := j.check
	switch r.Outcome {
	case probe.HTTPStatus:
		msg += " (healthy: " + c.HealthyStatus.String() + ")"
	case probe.BodyMismatch:
		msg += fmt.Sprintf(" (want %q in the first %d bytes)", c.BodyContains, c.MaxBodyBytes)
	case probe.Timeout:
		msg += " (timeout " + c.Timeout.String() + ")"
	}
	return msg
}

// probeLine is the JSON form of one result.
type probeLine struct {
	Target         string        `json:"target"`
	Protocol       string        `json:"protocol"`
	Outcome        probe.Outcome `json:"outcome"`
	Healthy        bool          `json:"healthy"`
	LatencySeconds float64       `json:"latency_seconds"`
	Status         *int          `json:"status,omitempty"` // HTTP only; 0 when no response arrived
	Address        string        `json:"address,omitempty"`
	Error          string        `json:"error,omitempty"`
	Phases         *phasesJSON   `json:"phases,omitempty"`      // HTTP only
	CertExpiry     *time.Time    `json:"cert_expiry,omitempty"` // HTTPS, when the server sent certificates
}

// phasesJSON are an HTTP probe's phase durations (see [probe.Phases]).
type phasesJSON struct {
	Connect   float64 `json:"connect_seconds"`
	TLS       float64 `json:"tls_seconds"`
	FirstByte float64 `json:"first_byte_seconds"`
	LastByte  float64 `json:"last_byte_seconds"`
}

// probeWriter prints results as text lines or JSON objects.
type probeWriter struct {
	enc *json.Encoder     // with -json
	tw  *tabwriter.Writer // otherwise
}

func newProbeWriter(w io.Writer, asJSON bool) *probeWriter {
	if asJSON {
		return &probeWriter{enc: json.NewEncoder(w)}
	}
	return &probeWriter{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (pw *probeWriter) write(j *probeJob, o probeOutcome) error {
	r := o.rep
	if pw.enc != nil {
		return pw.enc.Encode(newProbeLine(j, o))
	}
	status := "-"
	if j.proto != config.TCP && r.Status != 0 {
		status = strconv.Itoa(int(r.Status))
	}
	line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", j.arg, j.proto, r.Outcome, r.Latency.Round(time.Microsecond), status)
	if why := j.failureText(r); why != "" {
		line += "\t" + why
	}
	_, err := io.WriteString(pw.tw, line+"\n")
	return err
}

func (pw *probeWriter) flush() error {
	if pw.tw != nil {
		return pw.tw.Flush()
	}
	return nil
}

func newProbeLine(j *probeJob, o probeOutcome) probeLine {
	r := o.rep
	l := probeLine{
		Target:         j.arg,
		Protocol:       j.proto.String(),
		Outcome:        r.Outcome,
		Healthy:        r.Outcome.Healthy(),
		LatencySeconds: r.Latency.Seconds(),
		Error:          j.failureText(r),
	}
	if o.addr.IsValid() {
		l.Address = o.addr.String()
	}
	if j.proto != config.TCP {
		status := int(r.Status)
		l.Status = &status
		p := r.Phases
		l.Phases = &phasesJSON{Connect: p.Connect.Seconds(), TLS: p.TLS.Seconds(), FirstByte: p.FirstByte.Seconds(), LastByte: p.LastByte.Seconds()}
	}
	if !r.CertExpiry.IsZero() {
		e := r.CertExpiry.UTC()
		l.CertExpiry = &e
	}
	return l
}
