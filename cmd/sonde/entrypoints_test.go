package main

import (
	"errors"
	"io"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/endpointtest"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

// urlHost writes a target entry as the host of a URL: an IPv6 address in
// brackets, a zone's "%" escaped. That is URL syntax; the grammar of the
// host is the entry's.
func urlHost(entry string) string {
	if _, err := netip.ParseAddr(entry); err == nil && strings.Contains(entry, ":") {
		entry = "[" + entry + "]"
	}
	return strings.ReplaceAll(entry, "%", "%25")
}

// TestEntryPointsProbe runs the shared table through sonde probe, up to
// the address each URL is probed at: the first endpoint the daemon probes
// for the entry, or the same error (a failed probe for a lookup error, a
// usage error for the others). A URL's own syntax comes first: an entry
// that is no URL host (a port that is not a number, a bracketed IPv4
// address) is refused by it, and a block's "/" starts the URL's path.
func TestEntryPointsProbe(t *testing.T) {
	for _, c := range endpointtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			args := []string{"-ip-family", c.Family.String()}
			if c.Source != "" {
				args = append(args, "-source", c.Source)
			}
			host := urlHost(c.Entry)
			u := "http://" + host + "/"
			pu, perr := url.Parse(u)
			jobs, _, err := prepareProbes(t.Context(), append(args, u), io.Discard, endpointtest.Resolver)
			if perr != nil {
				if err == nil || !strings.Contains(err.Error(), errors.Unwrap(perr).Error()) {
					t.Fatalf("%s: %v, want the URL's error %v", u, err, perr)
				}
				return
			}
			if c.Kind == endpointtest.BlockRefused {
				if pu.Host == host || err == nil && jobs[0].addr.Addr() != netip.MustParsePrefix(c.Entry).Addr() {
					t.Fatalf("%s: host %q, %v", u, pu.Host, err)
				}
				return // the block's address with the path "/31/"
			}
			var ee *endpoint.EntryError
			var se *endpoint.SourceError
			switch {
			case c.Entry == "":
				if err == nil || !strings.Contains(err.Error(), "missing host") {
					t.Fatalf("%s: %v, want missing host", u, err)
				}
			case c.Kind == endpointtest.EntryErr:
				// The entry as the URL writes it, with the reason the
				// entry itself gets.
				want := strings.TrimPrefix(c.Err, strconv.Quote(c.Entry)+" ")
				if !errors.As(err, &ee) || ee.Reason != want {
					t.Fatalf("%s: %v, want the entry error %q", u, err, c.Err)
				}
			case c.Kind == endpointtest.SourceErr:
				if !errors.As(err, &se) || se.Error() != c.Err {
					t.Fatalf("%s: %v, want the source error %q", u, err, c.Err)
				}
			case err != nil:
				t.Fatalf("%s: %v", u, err)
			case c.Kind == endpointtest.LookupErr:
				if j := jobs[0]; j.addr.IsValid() || j.rep.Err == nil || j.rep.Err.Error() != c.Err {
					t.Fatalf("%s: address %v, error %v; want %q", u, j.addr, j.rep.Err, c.Err)
				}
			default:
				if got := jobs[0].addr.String(); got != c.Want[0] {
					t.Fatalf("%s: probed at %s (%v), want %s", u, got, jobs[0].rep.Err, c.Want[0])
				}
			}
		})
	}
}

// TestEntryPointsScan runs the shared table through sonde scan's targets,
// with -port 80: addresses and blocks give the daemon's endpoints, bad
// entries the same error, host names are refused. Scan's -source is the
// source of its own family only (the other family's comes from the route),
// so the source cases scan their address.
func TestEntryPointsScan(t *testing.T) {
	for _, c := range endpointtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			tab, err := scanTable([]string{c.Entry}, []uint16{endpointtest.Port})
			var ee *endpoint.EntryError
			switch {
			case c.Kind == endpointtest.EntryErr:
				if !errors.As(err, &ee) || ee.Error() != c.Err {
					t.Fatalf("scan %q: %v, want the entry error %q", c.Entry, err, c.Err)
				}
				return
			case c.IsName():
				if err == nil || !strings.Contains(err.Error(), "is a host name: sonde scan takes IP addresses") {
					t.Fatalf("scan %q: %v, want a host name refused", c.Entry, err)
				}
				return
			case err != nil:
				t.Fatalf("scan %q: %v", c.Entry, err)
			}
			want := c.Want
			if c.Kind == endpointtest.SourceErr {
				e, _ := endpoint.ParseEntry(c.Entry)
				want = []string{netip.AddrPortFrom(e.Addr, max(e.Port, endpointtest.Port)).String()}
			}
			var got []string
			for id := range tab.Len() {
				got = append(got, tab.Endpoint(uint32(id)).String())
			}
			if !slices.Equal(got, want) {
				t.Fatalf("scan %q: %v, want %v", c.Entry, got, want)
			}
		})
	}
}
