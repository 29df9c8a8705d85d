package config

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/internal/safefile"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// Resolver looks up the addresses of a host name ([endpoint.Resolver]).
// *net.Resolver implements it, and [endpoint.DNSResolver] also tells how
// long each answer holds; tests inject a fake so that no test touches the
// network.
type Resolver = endpoint.Resolver

// TargetEntry is one parsed target entry, of a config's targets, targets_file
// and disabled lists or of `sonde scan`'s arguments: exactly one of Addr,
// Block and Host is set.
type TargetEntry = endpoint.Entry

// ParseTargetEntry parses one target entry, the grammar of every target sonde
// reads, config files and commands alike ([endpoint.ParseEntry]):
//
//	198.18.0.7          IPv4 or IPv6 address ("[2001:db8::1]" too)
//	198.18.0.7:8080     address and port ("[2001:db8::1]:8080" for IPv6)
//	198.18.0.0/24       CIDR block, every address in it (no host bits set)
//	api-1.internal      host name
//	api-1.internal:8080 host name and port
//
// The error, an *endpoint.EntryError, quotes the entry and says what is
// wrong with it; config files and commands print it as it is, after the
// entry's location.
func ParseTargetEntry(s string) (TargetEntry, error) { return endpoint.ParseEntry(s) }

// blockSize returns the number of addresses in p and its text ("256",
// "2^64"); n is only valid when the block has fewer than 2^62 addresses.
func blockSize(p netip.Prefix) (n int, text string) {
	bits := p.Addr().BitLen() - p.Bits()
	if bits >= 62 {
		return 0, "2^" + strconv.Itoa(bits)
	}
	n = 1 << bits
	return n, strconv.Itoa(n)
}

// loc says where a target entry is, for error messages.
type loc struct {
	field  string // "pools[0].targets[2]" or "pools[0].targets_file"
	prefix string // "targets.txt:3: " for lines of a targets file
}

func (l loc) errorf(format string, args ...any) error {
	return &FieldError{Field: l.field, Msg: l.prefix + fmt.Sprintf(format, args...)}
}

// resolver looks host names up once per (name, family) during a load.
type resolver struct {
	r       Resolver
	ctx     context.Context
	timeout time.Duration
	cache   map[endpoint.Family]map[string]endpoint.Resolution
}

// lookup returns the lookup of name for the families fam, made once per
// load.
func (r *resolver) lookup(name string, fam endpoint.Family) endpoint.Resolution {
	if res, ok := r.cache[fam][name]; ok {
		return res
	}
	res := endpoint.Lookup(r.ctx, r.r, name, fam, r.timeout)
	if r.cache == nil {
		r.cache = map[endpoint.Family]map[string]endpoint.Resolution{}
	}
	if r.cache[fam] == nil {
		r.cache[fam] = map[string]endpoint.Resolution{}
	}
	r.cache[fam][name] = res
	return res
}

// endpointFunc receives the endpoints of one target entry. name is the host
// name the entry gave, or "".
type endpointFunc func(addr netip.Addr, port uint16, name string) error

// nameFunc receives a target entry given as a host name, with its port.
type nameFunc func(host string, port uint16) error

// expandSpec calls fn for every endpoint of one entry, with the port rule
// of [Check.TargetPort], or onName for an entry given as a host name (host
// names are looked up apart, see [Config.WithFound]); a TCP check without a
// port for the entry is an error. Addresses must match the family of the
// check's source address.
func (x *expander) expandSpec(l loc, raw string, c *Check, fn endpointFunc, onName nameFunc) error {
	ts, err := ParseTargetEntry(strings.TrimSpace(raw))
	if err != nil {
		return &FieldError{Field: l.field, Msg: l.prefix + err.Error(), Err: err}
	}
	port := c.TargetPort(ts.Port)
	if port == 0 {
		return l.errorf("%q has no port and check %q has none (protocol tcp has no default port)", raw, c.Name)
	}
	switch {
	case ts.Addr.IsValid():
		if err := checkFamily(l, ts.Addr.String(), ts.Addr, c); err != nil {
			return err
		}
		return fn(ts.Addr, port, "")
	case ts.Host != "":
		return onName(ts.Host, port)
	}
	p := ts.Block
	if err := checkFamily(l, "block "+p.String(), p.Addr(), c); err != nil {
		return err
	}
	n, text := blockSize(p)
	if n == 0 || n > x.limit {
		return l.errorf("block %s has %s addresses, more than the limit of %d targets", p, text, x.limit)
	}
	if x.adding {
		if total := x.listed + n; total > x.limit {
			return l.errorf("block %s brings the number of targets to %d, more than the limit of %d", p, total, x.limit)
		}
		x.b.Grow(n/x.shard.Shards() + 1)
	}
	a := p.Addr()
	for range n {
		if err := fn(a, port, ""); err != nil {
			return err
		}
		a = a.Next()
	}
	return nil
}

// checkFamily rejects a target whose address the check's source address
// cannot reach ([endpoint.Reachable]); the error wraps the
// *endpoint.SourceError.
func checkFamily(l loc, what string, a netip.Addr, c *Check) error {
	err := endpoint.CheckSource(c.SourceAddress, a)
	if err == nil {
		return nil
	}
	return &FieldError{Field: l.field, Msg: l.prefix + sourceMismatch(what, a, c), Err: err}
}

// sourceMismatch says that a, named what, is not of the family of c's
// source address.
func sourceMismatch(what string, a netip.Addr, c *Check) string {
	return fmt.Sprintf("%s is %s but source_address %s of check %q is %s", what, endpoint.Of(a).Noun(), c.SourceAddress, c.Name, endpoint.Of(c.SourceAddress).Noun())
}

// expandFile calls expandSpec for every target line of a targets file, and
// keeps the digest of what it read.
func (x *expander) expandFile(field, name string, c *Check, fn endpointFunc, onName nameFunc) error {
	path := resolvePath(x.dir, name)
	x.files = append(x.files, path)
	h := sha256.New()
	open := func(path string) (io.ReadCloser, error) { return safefile.Open(x.ctx, path, safefile.MaxTargets) }
	err := readTargetLines(open, path, name, h, func(line int, text string) error {
		return x.expandSpec(loc{field: field, prefix: linePrefix(name, line)}, text, c, fn, onName)
	})
	var re *readError
	if errors.As(err, &re) {
		return &FieldError{Field: field, Msg: re.msg, Err: re.err}
	}
	if err == nil {
		x.sums = addSum(x.sums, path, [sha256.Size]byte(h.Sum(nil)))
	}
	return err
}

// ParseTargetArgs parses command-line targets with the grammar of config
// files: each argument is a target entry ([ParseTargetEntry]) or @FILE, a
// file of entries like a config's targets_file. fn receives every entry in
// order. An error has the text a config file gets for the same entry or
// file, after "FILE:LINE: " for a file's lines; fn's errors get that
// position too.
func ParseTargetArgs(args []string, fn func(TargetEntry) error) error {
	parse := func(text string) error {
		e, err := ParseTargetEntry(strings.TrimSpace(text))
		if err != nil {
			return err
		}
		return fn(e)
	}
	for _, arg := range args {
		name, isFile := strings.CutPrefix(arg, "@")
		if !isFile {
			if err := parse(arg); err != nil {
				return err
			}
			continue
		}
		open := func(path string) (io.ReadCloser, error) { return os.Open(path) }
		err := readTargetLines(open, name, name, nil, func(line int, text string) error { // a pipe is fine here
			if err := parse(text); err != nil {
				return fmt.Errorf("%s%w", linePrefix(name, line), err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// readTargetLines calls fn with the number and text of every target line of
// the file at path, called name in messages: one target per line, "#" starts
// a comment, blank lines are skipped. fn's errors are returned as they are;
// a file that cannot be read gives a *readError. open opens the file: a
// config's targets_file is opened with package safefile, so that a load
// never waits for a FIFO's writer nor reads more than a targets file may
// hold. Every byte read is also written to sum, when not nil.
func readTargetLines(open func(string) (io.ReadCloser, error), path, name string, sum io.Writer, fn func(line int, text string) error) error {
	f, err := open(path)
	if err != nil {
		msg := fmt.Sprintf("%q: %s", name, errText(err))
		if errors.Is(err, safefile.ErrNotRegular) {
			msg = fmt.Sprintf("%q is not a regular file", name)
		}
		return &readError{msg: msg, err: err}
	}
	defer f.Close()
	var r io.Reader = f
	if sum != nil {
		r = io.TeeReader(f, sum)
	}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		if text = strings.TrimSpace(text); text == "" {
			continue
		}
		if err := fn(line, text); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &readError{msg: linePrefix(name, line+1) + "line too long", err: err}
		}
		return &readError{msg: fmt.Sprintf("%q: %s", name, errText(err)), err: err}
	}
	return nil
}

// linePrefix is how a line of a targets file is named in messages.
func linePrefix(name string, line int) string { return name + ":" + strconv.Itoa(line) + ": " }

// readError is a targets file that cannot be read.
type readError struct {
	msg string
	err error
}

func (e *readError) Error() string { return e.msg }
func (e *readError) Unwrap() error { return e.err }
