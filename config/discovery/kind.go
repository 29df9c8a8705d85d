package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
)

// SourceConfig is one source's configuration, decoded by its [Kind]: a
// [*FileSD], [*HTTPSD] or [*StaticSD], which the runner reads with readers
// of its own, or a [DiscovererConfig], which brings its discoverer.
type SourceConfig interface {
	// Mechanism names the kind of discovery: "file", "http", "static",
	// "dns", "kubernetes", "consul".
	Mechanism() string
}

// FileSD is a file_sd_configs entry: the files to read (patterns, made
// absolute by the decoding) and how often to read them again besides when
// they change.
type FileSD struct {
	Files           []string
	RefreshInterval time.Duration
}

// Mechanism is "file".
func (*FileSD) Mechanism() string { return "file" }

// HTTPSD is an http_sd_configs entry: the URL to ask, the client's
// settings, and how often to ask.
type HTTPSD struct {
	URL              string
	HTTPClientConfig commoncfg.HTTPClientConfig
	RefreshInterval  time.Duration
}

// Mechanism is "http".
func (*HTTPSD) Mechanism() string { return "http" }

// StaticSD is a static_configs entry: groups of targets with labels, sent
// once. Each group's Source keys it within the source.
type StaticSD struct {
	Groups []*targetgroup.Group
}

// Mechanism is "static".
func (*StaticSD) Mechanism() string { return "static" }

// DiscovererConfig is the configuration of a source that brings its own
// discoverer, such as one of Prometheus's.
type DiscovererConfig interface {
	SourceConfig
	// NewDiscoverer returns the source's discoverer; the runner runs it
	// until the source stops.
	NewDiscoverer(DiscovererOptions) (Discoverer, error)
}

// DiscovererOptions are what the runner gives a [DiscovererConfig] to
// make its discoverer with.
type DiscovererOptions struct {
	// Logger is the source's: what it logs at error level counts as a
	// failure of the source.
	Logger *slog.Logger
	// ClientLogger is the runner's own logger, for a client library that
	// logs for the whole process rather than for one source.
	ClientLogger *slog.Logger
	// Registerer takes the discoverer's metrics; the runner reads the
	// counters whose names end in _failures_total or _errors_total as the
	// source's failures.
	Registerer prometheus.Registerer
	// SetName names the source for the discoverer: "POOL/KEY[INDEX]".
	SetName string
}

// Discoverer sends the target groups of a source on up until ctx ends; a
// group without targets removes its Source's earlier group. Prometheus's
// discoverers satisfy it.
type Discoverer interface {
	Run(ctx context.Context, up chan<- []*targetgroup.Group)
}

// Kind is a kind of discovery source a pool may list under Key.
type Kind struct {
	Key  string // the pool's list: "kubernetes_sd_configs"
	Name string // the mechanism, as SourceConfig.Mechanism says it: "kubernetes"
	// Decode decodes entry, one element of the list written as YAML
	// without anchors or aliases, into its configuration; dir is the
	// directory relative paths are resolved against. A problem with one
	// field of the entry is a [*FieldError]; other errors are the YAML
	// decoder's, as they are.
	Decode func(entry []byte, dir string) (SourceConfig, error)
}

// FieldError is a problem with one field of a discovery entry: Field is its
// path within the entry ("labels.zone"), Msg says what is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// kinds are the kinds registered, by [RegisterKind] only, during package
// initialisation: read-only once main starts.
var kinds []Kind

// RegisterKind makes a kind of discovery source known to every
// configuration loaded afterwards. Call it only from an init function: the
// packages that hold the kinds register them when they are linked in (see
// package kinds), which build tags decide. It panics when a kind is
// registered twice or has no Decode.
func RegisterKind(k Kind) {
	if k.Key == "" || k.Name == "" || k.Decode == nil {
		panic(fmt.Sprintf("discovery: kind %q (%q) is incomplete", k.Key, k.Name))
	}
	if _, ok := LookupKind(k.Key); ok {
		panic(fmt.Sprintf("discovery: kind %q registered twice", k.Key))
	}
	kinds = append(kinds, k)
	slices.SortFunc(kinds, func(a, b Kind) int { return strings.Compare(a.Name, b.Name) })
}

// LookupKind returns the kind registered for a pool's list key.
func LookupKind(key string) (Kind, bool) {
	i := slices.IndexFunc(kinds, func(k Kind) bool { return k.Key == key })
	if i < 0 {
		return Kind{}, false
	}
	return kinds[i], true
}

// Kinds returns the kinds registered, sorted by name.
func Kinds() []Kind { return slices.Clone(kinds) }
