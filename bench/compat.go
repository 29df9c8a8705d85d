package bench

import "github.com/sondeprobe/sonde/bench/fleet"

// FleetConfig is [fleet.Config], for callers not yet moved to package
// bench/fleet.
//
// Deprecated: use [fleet.Config].
type FleetConfig = fleet.Config

// NewFleet is [fleet.New], for callers not yet moved to package bench/fleet.
//
// Deprecated: use [fleet.New].
func NewFleet(cfg fleet.Config) (*fleet.Fleet, error) { return fleet.New(cfg) }
