package config

import (
	"bytes"
	"context"
	"encoding"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"

	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/tcp"
)

// Probe holds the settings of a check that define one probe: what goes on
// the wire and how the answer is judged. It is the one place such a setting
// lives: the probe stream key ([Check.ProbeKey]), the probers' options
// ([Probe.HTTPOptions], [Probe.TCPOptions]) and the report of `sonde config
// check` are derived from it. JSON names are the keys of the config file.
type Probe struct {
	Protocol      Protocol   `json:"protocol"`
	IPFamily      IPFamily   `json:"ip_family"`               // address family preferred for host-name targets
	SourceAddress netip.Addr `json:"source_address,omitzero"` // local address probes are sent from; invalid for the system's choice
	TCPMode       TCPMode    `json:"tcp_mode,omitzero"`       // TCP checks only
	SynRetransmit Retransmit `json:"syn_retransmit,omitzero"` // TCP checks on the SYN prober only: when an unanswered SYN is sent again (T5)

	// HTTP and HTTPS checks only (zero for TCP).
	Method        string                `json:"method,omitempty"`         // "GET" or "HEAD"
	Path          string                `json:"path,omitempty"`           // request path, starting with "/"
	HealthyStatus httpprobe.StatusCodes `json:"healthy_status,omitzero"`  // status codes that count as success (H3)
	BodyContains  string                `json:"body_contains,omitempty"`  // substring the body must contain (H4); "" for no body check
	MaxBodyBytes  int                   `json:"max_body_bytes,omitempty"` // body bytes read when looking for BodyContains
	Host          string                `json:"host,omitempty"`           // Host header; "" means DefaultHost, else the target's host name or address
	DefaultHost   string                `json:"default_host,omitempty"`   // host of the Host header when Host is "", with the target's port (App Gateway's 127.0.0.1)
	SNI           string                `json:"sni,omitempty"`            // TLS server name sent (HTTPS); "" means the target's host name
	UserAgent     string                `json:"user_agent,omitempty"`     // User-Agent header; "" lets the prober choose
	Headers       map[string]string     `json:"headers,omitempty"`        // extra request headers, canonical names
	AuthToken     AuthToken             `json:"auth_token,omitzero"`      // signed probe token (H10), zero for none
	TLS           httpprobe.TLSOptions  `json:"tls,omitzero"`             // HTTPS settings; its server name is SNI
}

// HTTPOptions returns the HTTP prober's options for an HTTP or HTTPS probe,
// reading the secret of its auth token when it has one; ctx bounds the
// read.
func (p *Probe) HTTPOptions(ctx context.Context) (httpprobe.Options, error) {
	o := httpprobe.Options{
		Scheme:       p.Protocol.String(),
		Method:       p.Method,
		Path:         p.Path,
		Healthy:      &p.HealthyStatus,
		Body:         p.BodyContains,
		MaxBodyBytes: int64(p.MaxBodyBytes),
		Host:         p.Host,
		DefaultHost:  p.DefaultHost,
		SNI:          p.SNI,
		UserAgent:    p.UserAgent,
		TLS:          p.TLS,
		Source:       p.SourceAddress,
	}
	if len(p.Headers) > 0 {
		o.Headers = make(http.Header, len(p.Headers))
		for k, v := range p.Headers {
			o.Headers.Set(k, v)
		}
	}
	var err error
	switch a := p.AuthToken; {
	case a.SecretFile != "":
		o.Token, err = httpprobe.TokenFromFile(ctx, a.SecretFile)
	case a.SecretEnv != "":
		o.Token, err = httpprobe.TokenFromEnv(a.SecretEnv)
	}
	if err != nil {
		return o, fmt.Errorf("auth_token: %w", err)
	}
	return o, nil
}

// TCPOptions returns the connect() prober's options for a TCP probe.
func (p *Probe) TCPOptions() tcp.Options { return tcp.Options{Source: p.SourceAddress} }

// ProbeKey identifies the probe of a check: its [Probe] settings and its
// timeout, every field of them, so that a setting added to Probe cannot be
// left out. Checks with equal keys form one probe class. The check's port is
// left out on purpose: a target's effective port is part of the stream key,
// so two checks that differ only in their default port still share the
// streams of targets that name the same port.
func (c *Check) ProbeKey() string {
	b := appendKey(nil, reflect.ValueOf(&c.Probe).Elem())
	return string(strconv.AppendInt(b, int64(c.Timeout), 10))
}

var textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()

// appendKey appends an encoding of v to b that differs whenever v differs:
// the fields of a struct in order, a struct that marshals itself as text
// (netip.Addr, httpprobe.StatusCodes) by its text, strings with their
// length, map entries sorted. It panics on a kind it cannot encode (pointer, slice,
// interface, func, channel, float): a Probe field of such a type is a bug
// that the first check resolved in any test shows.
func appendKey(b []byte, v reflect.Value) []byte {
	if v.Kind() == reflect.Struct && v.Type().Implements(textMarshaler) {
		text, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			panic(fmt.Sprintf("config: probe key of %s: %v", v.Type(), err))
		}
		return appendString(b, string(text))
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			b = appendKey(b, v.Field(i))
		}
		return b
	case reflect.Map:
		entries := make([][]byte, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			entries = append(entries, appendKey(appendKey(nil, it.Key()), it.Value()))
		}
		slices.SortFunc(entries, bytes.Compare)
		b = strconv.AppendInt(append(b, '{'), int64(len(entries)), 10)
		for _, e := range entries {
			b = append(b, e...)
		}
		return append(b, '}')
	case reflect.String:
		return appendString(b, v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return append(strconv.AppendInt(b, v.Int(), 10), ';')
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return append(strconv.AppendUint(b, v.Uint(), 10), ';')
	case reflect.Bool:
		return append(strconv.AppendBool(b, v.Bool()), ';')
	}
	panic(fmt.Sprintf("config: probe key: cannot encode a %s (%s)", v.Kind(), v.Type()))
}

// appendString appends s with its length, so that no two sequences of
// strings encode alike.
func appendString(b []byte, s string) []byte {
	return append(append(strconv.AppendInt(b, int64(len(s)), 10), ':'), s...)
}
