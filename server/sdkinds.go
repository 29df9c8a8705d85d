package server

// The daemon runs the discovery sources of the kinds built into the
// binary: package kinds registers them (Kubernetes and Consul unless the
// build tags nokubernetes and noconsul leave them out).
import _ "github.com/sondeprobe/sonde/config/discovery/kinds"
