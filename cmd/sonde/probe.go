package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/server/prober"
)

const probeUsage = `Usage: sonde probe [flags] URL...

Probes every URL once, concurrently, and prints one line per URL in the order
given: target, protocol, outcome, latency, status and, for a failure, why.
URL is one of
  tcp://HOST:PORT       TCP handshake with the connect() prober
  connect://HOST:PORT   the same
  syn://HOST:PORT       raw SYN, reply caught by eBPF: SYN-ACK, RST or ICMP
                        unreachable (needs CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN)
  http://HOST[:PORT][/PATH][?QUERY]
  https://HOST[:PORT][/PATH][?QUERY]
The URL's path and query are the request path; its host is resolved (see
-ip-family) and is the default Host header (127.0.0.1 with -preset
appgateway, as its default probe) and TLS server name. HTTP flags apply to
http:// and https:// URLs only, TLS flags to https:// only.
Each URL is a check: -preset (or sonde's defaults) with the flags on top,
validated like a check in a config file.

Exit status: 0 when every target is healthy, 1 when any is not, 2 for bad
usage or settings.

Flags:
`

// probeSetting is a flag of "sonde probe" that sets a setting of the
// check: key is the setting's name in a config file, so that an error about
// the setting names the flag; only says which URLs it applies to (0 for
// all, HTTP for http:// and https://, HTTPS for https://).
type probeSetting struct {
	flag, key, usage string
	only             config.Protocol
	boolean          bool
	set              func(s *config.CheckSpec, v string) error
}

var probeSettings = []probeSetting{
	{flag: "preset", key: "preset", usage: "apply the defaults of a `preset`: appservice, frontdoor, appgateway or globalaccelerator",
		set: func(s *config.CheckSpec, v string) error { s.Preset = &v; return nil }},
	{flag: "timeout", key: "timeout", usage: "per-probe timeout, a `duration` such as 500ms (default 3s, or the preset's)",
		set: func(s *config.CheckSpec, v string) (err error) { s.Timeout, err = parseDurationFlag(v); return err }},
	{flag: "source", key: "source_address", usage: "source `IP` address of the probes",
		set: func(s *config.CheckSpec, v string) error { s.SourceAddress = &v; return nil }},
	{flag: "ip-family", key: "ip_family", usage: "address `family` of host names: ip4, ip6 or any (default any: the lowest IPv4 address, else the lowest IPv6, as the daemon orders them; within -source's family)",
		set: func(s *config.CheckSpec, v string) error { s.IPFamily = &v; return nil }},
	{flag: "syn-retransmit", key: "syn_retransmit", only: config.TCP, usage: "send an unanswered SYN again after this `duration`, then twice as long again, within the timeout: kernel (1s, the default), off, or a duration such as 200ms (syn:// only)",
		set: func(s *config.CheckSpec, v string) error { s.SynRetransmit = &v; return nil }},
	{flag: "method", key: "method", only: config.HTTP, usage: "HTTP `method`, GET or HEAD (default GET, HEAD with -preset frontdoor)",
		set: func(s *config.CheckSpec, v string) error { s.Method = &v; return nil }},
	{flag: "status", key: "healthy_status", only: config.HTTP, usage: "healthy status `codes`, such as 200-399,403 (default 200-299 or the preset's)",
		set: func(s *config.CheckSpec, v string) error { s.HealthyStatus = &v; return nil }},
	{flag: "body", key: "body_contains", only: config.HTTP, usage: "`text` the response body must contain",
		set: func(s *config.CheckSpec, v string) error { s.BodyContains = &v; return nil }},
	{flag: "host", key: "host", only: config.HTTP, usage: "`name[:port]` sent as the Host header (default: the URL's host and port; 127.0.0.1[:port] with -preset appgateway)",
		set: func(s *config.CheckSpec, v string) error { s.Host = &v; return nil }},
	{flag: "user-agent", key: "user_agent", only: config.HTTP, usage: "`text` of the User-Agent header (default sonde's, or the preset's)",
		set: func(s *config.CheckSpec, v string) error { s.UserAgent = &v; return nil }},
	{flag: "header", key: "headers", only: config.HTTP, usage: "extra request header `NAME:VALUE` (repeatable)", set: setHeader},
	{flag: "sni", key: "sni", only: config.HTTPS, usage: "TLS server `name` (default: the host of the Host header)",
		set: func(s *config.CheckSpec, v string) error { s.SNI = &v; return nil }},
	{flag: "ca-file", key: "tls.ca_file", only: config.HTTPS, usage: "PEM `file` of the CA certificates that verify servers (default: the system's)",
		set: func(s *config.CheckSpec, v string) error { tlsSpec(s).CAFile = &v; return nil }},
	{flag: "insecure", key: "tls.insecure_skip_verify", only: config.HTTPS, boolean: true, usage: "accept any TLS server certificate",
		set: func(s *config.CheckSpec, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q: want true or false", v)
			}
			tlsSpec(s).InsecureSkipVerify = &b
			return nil
		}},
}

// appliesTo reports whether the setting applies to a URL of protocol p.
func (ps *probeSetting) appliesTo(p config.Protocol) bool {
	return ps.only == 0 || p == ps.only || ps.only == config.HTTP && p == config.HTTPS
}

func parseDurationFlag(v string) (*config.Duration, error) {
	d, err := config.ParseDuration(v)
	return &d, err
}

func tlsSpec(s *config.CheckSpec) *config.TLSSpec {
	if s.TLS == nil {
		s.TLS = new(config.TLSSpec)
	}
	return s.TLS
}

// setHeader adds one -header NAME:VALUE; the check validates name and value.
func setHeader(s *config.CheckSpec, v string) error {
	name, value, ok := strings.Cut(v, ":")
	if name = strings.TrimSpace(name); !ok || name == "" {
		return fmt.Errorf("%q: want NAME:VALUE", v)
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	if _, dup := s.Headers[canon]; dup {
		return fmt.Errorf("%q: header %s is given more than once", v, canon)
	}
	if s.Headers == nil {
		s.Headers = map[string]string{}
	}
	s.Headers[canon] = strings.TrimSpace(value)
	return nil
}

// flagValue is one setting flag as given on the command line.
type flagValue struct {
	*probeSetting
	value string
}

// runProbe runs "sonde probe". It returns a usage error (exit 2) for bad
// flags, URLs or settings, silentExit(1) when a target is unhealthy, and nil
// when every target is healthy.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runProbeWith(ctx, args, stdout, stderr, &endpoint.DNSResolver{})
}

// runProbeWith is runProbe with the resolver of the URLs' host names.
func runProbeWith(ctx context.Context, args []string, stdout, stderr io.Writer, res endpoint.Resolver) error {
	jobs, asJSON, err := prepareProbes(ctx, args, stderr, res)
	if err != nil {
		return err
	}
	probers, err := chooseProbers(ctx, jobs)
	if err != nil {
		return err
	}
	defer probers.Close()

	out := newProbeWriter(stdout, asJSON)
	healthy := true
	err = probeAll(ctx, jobs, func(j *probeJob) error {
		healthy = healthy && j.rep.Outcome.Healthy()
		return out.write(j)
	})
	if err == nil {
		err = out.flush()
	}
	if err != nil {
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

// prepareProbes parses the flags and URLs of args, builds every URL's
// check and resolves its host with res: the jobs, each with its address or
// the error that its probe fails with, and whether -json is set. Bad flags,
// URLs or settings are usage errors.
func prepareProbes(ctx context.Context, args []string, stderr io.Writer, res endpoint.Resolver) ([]*probeJob, bool, error) {
	settings, asJSON, urls, err := parseProbeFlags(args, stderr)
	if err != nil {
		return nil, false, err
	}
	jobs := make([]*probeJob, len(urls))
	for i, arg := range urls {
		if jobs[i], err = parseProbeURL(arg); err != nil {
			return nil, false, usageError(err)
		}
	}
	if err := checkApplicable(settings, jobs); err != nil {
		return nil, false, usageError(err)
	}
	for _, j := range jobs {
		if j.check, err = j.newCheck(ctx, settings); err != nil {
			return nil, false, usageError(err)
		}
		if err := prober.CheckTarget(j.check, j.entry); err != nil {
			return nil, false, usageError(fmt.Errorf("probe: URL %q: %w", j.arg, err))
		}
	}
	resolveJobs(ctx, jobs, res)
	return jobs, asJSON, nil
}

// parseProbeFlags parses the flags and returns the settings given, in
// order, whether -json is set, and the URLs.
func parseProbeFlags(args []string, stderr io.Writer) ([]flagValue, bool, []string, error) {
	fs := newFlagSet("probe", probeUsage, stderr)
	var given []flagValue
	for i := range probeSettings {
		ps := &probeSettings[i]
		keep := func(v string) error { given = append(given, flagValue{ps, v}); return nil }
		if ps.boolean {
			fs.BoolFunc(ps.flag, ps.usage, keep)
		} else {
			fs.Func(ps.flag, ps.usage, keep)
		}
	}
	asJSON := fs.Bool("json", false, `print one JSON object per target: {"target","protocol","outcome","healthy","latency_seconds","status",...}`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, false, nil, silentExit(exitOK)
		}
		return nil, false, nil, usageError(err)
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, probeUsage)
		return nil, false, nil, usageError(errors.New("probe: no URL to probe"))
	}
	return given, *asJSON, fs.Args(), nil
}

// checkApplicable rejects HTTP or TLS flags given without any URL they
// apply to: they would silently do nothing.
func checkApplicable(settings []flagValue, jobs []*probeJob) error {
	for _, s := range settings {
		applies := false
		for _, j := range jobs {
			applies = applies || s.appliesTo(j.proto)
		}
		if !applies {
			what := "http:// and https://"
			switch s.only {
			case config.HTTPS:
				what = "https://"
			case config.TCP:
				what = "syn://"
			}
			return fmt.Errorf("probe: -%s applies to %s URLs, and none is given", s.flag, what)
		}
	}
	return nil
}
