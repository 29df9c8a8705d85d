package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/probe/syn"
	"github.com/sondeprobe/sonde/server/prober"
)

// probeJob is one URL of the command line and what probing it takes.
type probeJob struct {
	arg     string             // the URL as given
	proto   config.Protocol    // from the scheme
	tcpMode string             // tcp_mode from the scheme, TCP only
	entry   config.TargetEntry // the URL's host: an address or a host name
	host    string             // the URL's host without brackets
	port    uint16
	path    string // request path and query, HTTP only

	check  *config.Check  // the URL's check: flags on top of the preset
	addr   netip.AddrPort // where the probe goes; invalid when the host did not resolve
	prober probe.Reporter // shared by the jobs of one probe
	rep    probe.Report
}

// probeScheme maps a URL scheme to the protocol and tcp_mode of its check.
func probeScheme(scheme string) (proto config.Protocol, tcpMode string, ok bool) {
	switch scheme {
	case "tcp", "connect":
		return config.TCP, "connect", true // a single probe gains nothing from raw SYNs
	case "syn":
		return config.TCP, "syn", true
	case "http":
		return config.HTTP, "", true
	case "https":
		return config.HTTPS, "", true
	}
	return 0, "", false
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
	want := u.Scheme + "://HOST[:PORT][/PATH]"
	if j.proto == config.TCP {
		want = u.Scheme + "://HOST:PORT"
	}
	switch {
	case u.Opaque != "" || u.Hostname() == "":
		return nil, bad("missing host; want %s", want)
	case u.User != nil:
		return nil, bad("user information is not supported")
	}
	// The host and port are a target entry of a config file ("host",
	// "host:port", "[v6]:port"), refused as config refuses them; "host:"
	// with an empty port is the URL's default port. This runs before any
	// lookup or probe.
	e, err := config.ParseTargetEntry(strings.TrimSuffix(u.Host, ":"))
	if err != nil {
		return nil, fmt.Errorf("probe: URL %q: %w", arg, err)
	}
	j.entry, j.host = e, e.Host
	if e.Addr.IsValid() {
		j.host = e.Addr.String()
	}
	switch {
	case e.Port != 0:
		j.port = e.Port
	case j.proto == config.TCP:
		return nil, bad("missing port; want %s", want)
	case j.proto == config.HTTPS:
		j.port = 443
	default:
		j.port = 80
	}
	if j.proto != config.TCP {
		j.path = u.RequestURI()
	} else if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery {
		return nil, bad("a %s target has no path or query", u.Scheme)
	}
	return j, nil
}

// newCheck resolves the check of j: the URL's protocol, tcp_mode and path,
// and the settings that apply to it, validated by config like a check in a
// file (ctx bounds the reading of its files). An error names the flag or
// the URL the bad setting came from.
func (j *probeJob) newCheck(ctx context.Context, settings []flagValue) (*config.Check, error) {
	proto := j.proto.String()
	s := &config.CheckSpec{Protocol: &proto}
	if j.proto == config.TCP {
		s.TCPMode = &j.tcpMode
	} else {
		s.Path = &j.path
	}
	for _, f := range settings {
		if !f.appliesTo(j.proto) {
			continue
		}
		if err := f.set(s, f.value); err != nil {
			return nil, fmt.Errorf("probe: -%s: %w", f.flag, err)
		}
	}
	const name = "probe"
	c, err := config.NewCheck(ctx, name, s, "")
	var fe *config.FieldError
	if err == nil || !errors.As(err, &fe) {
		return c, err
	}
	key := strings.TrimPrefix(fe.Field, "checks."+name+".")
	for _, f := range settings {
		if key == f.key {
			return nil, &settingError{"-" + f.flag, fe}
		}
		if rest, ok := strings.CutPrefix(key, f.key+"."); ok {
			return nil, &settingError{"-" + f.flag + " " + rest, fe}
		}
	}
	return nil, &settingError{fmt.Sprintf("URL %q (%s)", j.arg, key), fe}
}

// settingError is a config error in a setting of "sonde probe"; where names
// the flag or the URL the setting came from.
type settingError struct {
	where string
	err   *config.FieldError
}

func (e *settingError) Error() string { return "probe: " + e.where + ": " + e.err.Msg }
func (e *settingError) Unwrap() error { return e.err }

// resolveJobs resolves the host of every job with res, each name once per
// family, within its check's timeout, as prober.Address resolves it for
// /probe. A job whose host does not resolve gets its error as an Error
// outcome and is not probed.
func resolveJobs(ctx context.Context, jobs []*probeJob, res endpoint.Resolver) {
	type key struct {
		host   string
		family endpoint.Family
	}
	type answer struct {
		addr netip.Addr
		err  error
	}
	seen := map[key]answer{}
	for _, j := range jobs {
		k := key{j.host, j.check.IPFamily.ForSource(j.check.SourceAddress)}
		a, ok := seen[k]
		if !ok {
			a.addr, a.err = prober.Address(ctx, res, j.check, j.entry, j.check.Timeout)
			seen[k] = a
		}
		if a.err != nil {
			j.rep = probe.Report{Result: probe.Result{Outcome: probe.Error}, Err: a.err}
			continue
		}
		j.addr = netip.AddrPortFrom(a.addr, j.port)
	}
}

// chooseProbers gives every resolved job its prober, chosen by
// prober.Probers as the daemon chooses: one per distinct probe, and one SYN
// prober for the syn:// URLs, started here for their endpoints. The caller
// closes the Probers. ctx bounds the reading of the checks' files.
func chooseProbers(ctx context.Context, jobs []*probeJob) (*prober.Probers, error) {
	var eps []netip.AddrPort
	for _, j := range jobs {
		if j.addr.IsValid() && j.check.TCPMode == config.TCPSyn {
			eps = append(eps, j.addr)
		}
	}
	ps, err := prober.NewProbers(eps)
	if err != nil {
		if errors.Is(err, syn.ErrNoRawSocket) {
			return nil, fmt.Errorf("probe: syn:// sends raw SYNs and needs CAP_NET_RAW (root, or setcap cap_net_raw,cap_bpf,cap_net_admin+ep on sonde); tcp:// probes with connect() without privileges: %w", err)
		}
		return nil, fmt.Errorf("probe: %w", err)
	}
	for _, j := range jobs {
		if !j.addr.IsValid() {
			continue
		}
		if j.prober, err = ps.For(ctx, j.check); err != nil {
			_ = ps.Close()
			return nil, fmt.Errorf("probe: %s: %w", j.arg, err)
		}
	}
	return ps, nil
}
