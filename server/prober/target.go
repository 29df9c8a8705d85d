package prober

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/sondeprobe/sonde/config"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
)

// ProbeTarget is the destination of a one-shot probe asked for from outside
// the configuration, such as the target= of /probe: a target entry without
// a CIDR block, or an http:// or https:// URL whose scheme, port and path
// then stand in for the check's (as blackbox_exporter's HTTP targets do).
type ProbeTarget struct {
	config.TargetEntry        // Addr or Host, and Port (0 when not given); Block is never set
	Scheme             string // "http" or "https" for a URL, "" otherwise
	Path               string // a URL's path and query; "" when it has neither
}

// maxProbeTarget bounds the length of a probe target.
const maxProbeTarget = 2048

// ParseProbeTarget parses a probe target. It is meant for hostile input:
// the text is bounded, a host part follows the grammar of target entries
// ([config.ParseTargetEntry]), a URL may carry no user information or fragment and
// its path must be a request path the HTTP prober can send. The error says
// what is wrong with the text, which it quotes.
func ParseProbeTarget(s string) (ProbeTarget, error) {
	if len(s) > maxProbeTarget {
		return ProbeTarget{}, fmt.Errorf("%d bytes, more than %d", len(s), maxProbeTarget)
	}
	if s == "" {
		return ProbeTarget{}, fmt.Errorf("empty; want host[:port], address[:port] or an http(s) URL")
	}
	scheme, _, isURL := strings.Cut(s, "://")
	if !isURL {
		e, err := config.ParseTargetEntry(s)
		if err != nil {
			return ProbeTarget{}, err
		}
		if e.Block.IsValid() {
			return ProbeTarget{}, fmt.Errorf("%q is a CIDR block; probe one address at a time", s)
		}
		return ProbeTarget{TargetEntry: e}, nil
	}
	if scheme != "http" && scheme != "https" {
		return ProbeTarget{}, fmt.Errorf("%q has scheme %q; want http or https", s, scheme)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return ProbeTarget{}, fmt.Errorf("%q is not a URL", s)
	case u.User != nil:
		return ProbeTarget{}, fmt.Errorf("%q carries user information, which probes do not send", s)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return ProbeTarget{}, fmt.Errorf("%q has a fragment, which probes do not send", s)
	case u.Host == "":
		return ProbeTarget{}, fmt.Errorf("%q has no host", s)
	}
	e, err := config.ParseTargetEntry(u.Host)
	if err != nil || e.Block.IsValid() {
		return ProbeTarget{}, fmt.Errorf("%q: host %q is not an IP address or host name with an optional port", s, u.Host)
	}
	t := ProbeTarget{TargetEntry: e, Scheme: scheme}
	if p := u.EscapedPath(); p != "" || u.RawQuery != "" {
		if p == "" {
			p = "/"
		}
		if u.RawQuery != "" || u.ForceQuery {
			p += "?" + u.RawQuery
		}
		if !httpprobe.ValidPath(p) {
			return ProbeTarget{}, fmt.Errorf("%q: path %q is not a request path", s, p)
		}
		t.Path = p
	}
	return t, nil
}
