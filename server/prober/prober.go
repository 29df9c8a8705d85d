package prober

import (
	"context"
	"errors"
	"fmt"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/tcp"
)

// ErrNoSyn is returned (wrapped) by [New] for a check in tcp_mode syn when
// the caller has no SYN prober.
var ErrNoSyn = errors.New("tcp_mode syn needs the SYN prober")

// New picks the prober of check c, the one choice the daemon, `sonde probe`
// and /probe share. A TCP check runs on the caller's SYN prober when the
// caller has one (synReady) and c's tcp_mode is not connect: then New
// returns useSyn true and no prober. Otherwise it returns c's one-shot
// prober: the HTTP prober for HTTP and HTTPS checks, connect() for TCP
// checks; a TCP check in tcp_mode syn without a SYN prober is an error.
// ctx bounds the reading of the check's files (secret, certificates).
func New(ctx context.Context, c *config.Check, synReady bool) (p probe.Reporter, useSyn bool, err error) {
	switch {
	case c.Protocol != config.TCP:
		o, err := c.HTTPOptions(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("check %s: %w", c.Name, err)
		}
		hp, err := httpprobe.New(ctx, o)
		if err != nil {
			return nil, false, fmt.Errorf("check %s: %w", c.Name, err)
		}
		return hp, false, nil
	case synReady && c.TCPMode != config.TCPConnect:
		return nil, true, nil
	case c.TCPMode == config.TCPSyn:
		return nil, false, fmt.Errorf("check %s: %w", c.Name, ErrNoSyn)
	}
	return tcp.New(c.TCPOptions()), false, nil
}
