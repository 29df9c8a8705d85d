//go:build !noconsul

package kinds

import (
	promsd "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/consul"

	"github.com/sondeprobe/sonde/config/discovery"
)

func init() {
	discovery.RegisterKind(discovery.Kind{Key: "consul_sd_configs", Name: "consul",
		Decode: decodeProm(func() promsd.Config { return new(consul.SDConfig) })})
}
