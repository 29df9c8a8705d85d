package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/config/fleet"
	"github.com/sondeprobe/sonde/internal/safefile"
)

// DefaultMaxTargets is the default limit on the number of targets a config
// may list, counted before deduplication.
const DefaultMaxTargets = 1 << 24

// DefaultResolveTimeout bounds each host-name lookup by default.
const DefaultResolveTimeout = 10 * time.Second

// LoadOptions are the knobs of [Load] and [Parse]. The zero value is ready to
// use.
type LoadOptions struct {
	// Resolver resolves target host names; nil means net.DefaultResolver.
	Resolver Resolver
	// Context bounds host-name lookups and the reading of files: when it
	// ends, a load waiting on a file that does not answer fails at once.
	// nil means context.Background().
	Context context.Context
	// ResolveTimeout bounds each lookup; 0 means DefaultResolveTimeout.
	ResolveTimeout time.Duration
	// MaxTargets limits the targets listed over all pools, before
	// deduplication (a CIDR block counts all its addresses); 0 means
	// DefaultMaxTargets.
	MaxTargets int
	// LookupEnv reads environment variables (auth_token.secret_env); nil
	// means os.LookupEnv.
	LookupEnv func(key string) (string, bool)
	// Shard keeps only the targets of one shard ([Shard.Owns]); the zero
	// Shard keeps all. Whether a file is valid does not depend on it: every
	// shard checks every listed target, and MaxTargets counts them all.
	Shard Shard
}

// Config is a loaded, validated configuration. It is read-only once
// returned and safe for concurrent reads.
type Config struct {
	// Checks are the checks sorted by name; Target.Check and Pool.CheckIndex
	// index this slice.
	Checks []*Check
	// Pools are the pools in file order.
	Pools []*Pool
	// Targets holds every unique (address, port, check); the index is the
	// target id used by the scheduler, the probers and the API. Ids follow
	// the order in which targets are first listed in the file.
	Targets []Target
	// Hostnames maps the ids of targets given as host names to the name (for
	// the Host header and SNI defaults). Most targets have none.
	Hostnames map[uint32]string
	// Remediations are the remediation actions in file order (R1, R2).
	Remediations []*Remediation
	// Metrics holds the metrics options.
	Metrics Metrics
	// Webhooks are the endpoints that receive events, in file order.
	Webhooks []*EventWebhook
	// Shard is the slice of the targets this configuration holds
	// ([LoadOptions.Shard]): Targets, Pools' members and Hostnames are those
	// of this shard only.
	Shard Shard
	// Files are the files the configuration was read from, each once, with
	// the cap each is read with: the config file (when read by [Load]), then
	// the targets files and the TLS and secret files its pools, checks,
	// remediations and webhooks name, as opened.
	Files []safefile.File
	// Sums are the SHA-256 digests of the bytes the load read and parsed,
	// by path as in Files, of the files it read itself: the config file
	// (when read by [Load]) and the targets files. TLS and secret files are
	// read later, by the probers, and have none. A targets file that
	// several pools name and whose content changed between their reads has
	// the zero sum, which no content has.
	Sums map[string][sha256.Size]byte
	// Warnings are what the operator should fix in this valid
	// configuration, in file order.
	Warnings []Warning

	static     *Config // the configuration before WithFound; nil when this is it
	listed     int     // targets listed, in every shard, counted against maxTargets
	maxTargets int
}

// Target is one unique (address, port, check) of the table: see
// [fleet.Target].
type Target = fleet.Target

// Shard is one slice of the targets: see [fleet.Shard].
type Shard = fleet.Shard

// Metrics holds the metrics options.
type Metrics struct {
	// PerTarget enables per-target series (default true); huge fleets turn
	// them off to bound cardinality.
	PerTarget bool
}

// Load reads and parses the config file at path, a regular file of at most
// safefile.MaxConfig bytes. Relative paths inside it (targets_file, TLS
// files, secret files, remediation commands) are relative to the file's
// directory.
func Load(path string, opt LoadOptions) (*Config, error) {
	ctx := opt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	data, err := readConfig(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data, filepath.Dir(path), opt)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	for _, c := range []*Config{cfg, cfg.static} { // the static one too: WithFound copies it
		if c != nil {
			c.Files = slices.Insert(slices.Clone(c.Files), 0, safefile.File{Path: path, Max: safefile.MaxConfig})
			c.Sums = addSum(maps.Clone(c.Sums), path, sum)
		}
	}
	return cfg, nil
}

// ReadStream reads a config from r, a stream such as standard input or a
// pipe, for a one-shot command: to its end, at most safefile.MaxConfig
// bytes, or until ctx ends (the read then goes on in the background, and
// its result is dropped). name names the stream in errors. Parse what it
// returns; the daemon loads regular files only ([Load]).
func ReadStream(ctx context.Context, name string, r io.Reader) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, safefile.MaxConfig+1))
		done <- result{b, err}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("read %s: %w", name, context.Cause(ctx))
	case res := <-done:
		switch {
		case res.err != nil:
			return nil, fmt.Errorf("read %s: %w", name, res.err)
		case int64(len(res.b)) > safefile.MaxConfig:
			return nil, fmt.Errorf("read %s: more than %d bytes, the most a config may have", name, safefile.MaxConfig)
		}
		return res.b, nil
	}
}

// addSum records in sums (made when nil) that path was read with digest
// sum; a path read before with another digest gets the zero sum: the file
// changed while it was read.
func addSum(sums map[string][sha256.Size]byte, path string, sum [sha256.Size]byte) map[string][sha256.Size]byte {
	if sums == nil {
		sums = map[string][sha256.Size]byte{}
	}
	if prev, ok := sums[path]; ok && prev != sum {
		sum = [sha256.Size]byte{}
	}
	sums[path] = sum
	return sums
}

// readConfig reads the config file at path ([safefile.ReadFile]). A file
// that is not regular or too large is named with what is wrong, as
// "PATH: not a regular file"; other errors say what failed on it.
func readConfig(ctx context.Context, path string) ([]byte, error) {
	b, err := safefile.ReadFile(ctx, path, safefile.MaxConfig)
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("%s: %w", path, errors.Unwrap(err))
	}
	return b, err
}

// Parse parses a config held in data; dir is the directory relative paths in
// it are resolved against ("" for the current directory).
func Parse(data []byte, dir string, opt LoadOptions) (*Config, error) {
	f, err := decodeFile(data)
	if err != nil {
		return nil, err
	}
	return build(f, dir, opt)
}

// build resolves, validates, expands and deduplicates a decoded file.
func build(f *File, dir string, opt LoadOptions) (*Config, error) {
	if opt.Resolver == nil {
		opt.Resolver = net.DefaultResolver
	}
	if opt.Context == nil {
		opt.Context = context.Background()
	}
	if opt.ResolveTimeout <= 0 {
		opt.ResolveTimeout = DefaultResolveTimeout
	}
	if opt.MaxTargets <= 0 {
		opt.MaxTargets = DefaultMaxTargets
	}
	opt.MaxTargets = min(opt.MaxTargets, fleet.MaxTargetID+1)
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	if err := opt.Shard.Validate(); err != nil {
		return nil, err
	}

	cfg := &Config{Metrics: Metrics{PerTarget: true}, Shard: opt.Shard}
	var err error
	files := &fileReader{ctx: opt.Context, dir: dir}
	if cfg.Checks, err = resolveChecks(f.Checks, files, opt.LookupEnv); err != nil {
		return nil, err
	}
	if len(f.Pools) == 0 {
		return nil, fieldErr("pools", "missing; a config needs at least one pool")
	}
	x := &expander{dir: dir, ctx: opt.Context, limit: opt.MaxTargets, shard: opt.Shard, kinds: discovery.LookupKind,
		dns: resolver{r: opt.Resolver, ctx: opt.Context, timeout: opt.ResolveTimeout}}
	for i, ps := range f.Pools {
		p, err := x.addPool(i, ps, cfg.Checks, cfg.Pools)
		if err != nil {
			return nil, err
		}
		cfg.Pools = append(cfg.Pools, p)
	}
	if cfg.Remediations, err = resolveRemediations(f.Remediation, cfg.Pools, files); err != nil {
		return nil, err
	}
	cfg.listed, cfg.maxTargets = x.listed, x.limit
	cfg.Targets, cfg.Hostnames = x.build(cfg.Pools)
	if f.Metrics != nil && f.Metrics.PerTarget != nil {
		cfg.Metrics.PerTarget = *f.Metrics.PerTarget
	}
	if cfg.Webhooks, err = resolveWebhooks(f.Webhooks, files, cfg.Pools); err != nil {
		return nil, err
	}
	cfg.Files = readFiles(cfg.Checks, cfg.Remediations, cfg.Webhooks, x.files)
	cfg.Sums = x.sums
	cfg.Warnings = files.warnings
	return cfg.WithFound(seeded(cfg.Pools))
}

// seeded returns what the lookups made during the load give the pools'
// host names.
func seeded(pools []*Pool) map[string]discovery.Found {
	out := map[string]discovery.Found{}
	for _, p := range pools {
		if len(p.Discovery.Names) == 0 {
			continue
		}
		var f discovery.Found
		for _, n := range p.Discovery.Names {
			res := n.Seed
			if res.Err != nil {
				f.Unresolved = append(f.Unresolved, discovery.Unresolved{Host: n.Host, Port: n.Port, Labels: p.Labels,
					Err: res.Err.Error(), Since: res.At, Next: res.At.Add(discovery.RetryMin)})
				continue
			}
			for _, a := range res.Addrs {
				f.Targets = append(f.Targets, discovery.Target{Addr: a, Port: n.Port, Host: n.Host, Labels: p.Labels})
			}
		}
		out[p.Name] = f
	}
	return out
}

// maxChecks is the number of checks a uint16 index can address.
const maxChecks = 1 << 16

// resolveChecks resolves every check, sorted by name, and numbers the probe
// classes in that order.
func resolveChecks(specs map[string]*CheckSpec, files *fileReader, lookupEnv env) ([]*Check, error) {
	if len(specs) > maxChecks {
		return nil, fieldErr("checks", "%d checks, more than %d", len(specs), maxChecks)
	}
	names := slices.Sorted(maps.Keys(specs))
	checks := make([]*Check, 0, len(names))
	classes := make(map[string]int)
	for _, name := range names {
		c, err := resolveCheck(name, specs[name], files, lookupEnv)
		if err != nil {
			return nil, err
		}
		key := c.ProbeKey()
		class, ok := classes[key]
		if !ok {
			class = len(classes)
			classes[key] = class
		}
		c.Class = class
		checks = append(checks, c)
	}
	return checks, nil
}

// NewCheck resolves one check written as s, the way [Parse] resolves each
// entry of "checks": the preset's defaults (or sonde's) with s's settings on
// top, validated, its files read. Errors are [FieldError]s named
// "checks.NAME.FIELD"; relative paths in s are resolved against dir, and
// environment variables are read from the process. ctx bounds the reading
// of its files. The check's Class is 0.
func NewCheck(ctx context.Context, name string, s *CheckSpec, dir string) (*Check, error) {
	return resolveCheck(name, s, &fileReader{ctx: ctx, dir: dir}, os.LookupEnv)
}

// CheckByName returns the check called name, or nil.
func (c *Config) CheckByName(name string) *Check {
	i, ok := slices.BinarySearchFunc(c.Checks, name, func(ch *Check, n string) int {
		switch {
		case ch.Name < n:
			return -1
		case ch.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return c.Checks[i]
}
