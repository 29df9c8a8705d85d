package prober

import (
	"errors"
	"testing"

	"github.com/sondeprobe/sonde/config"
	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/probe/tcp"
)

// TestNew covers the one choice of a check's prober that the daemon,
// sonde probe and /probe share.
func TestNew(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	port := 22
	check := func(protocol, mode string) *config.Check {
		t.Helper()
		s := &config.CheckSpec{Protocol: str(protocol)}
		if protocol == "tcp" {
			s.Port = &port
		}
		if mode != "" {
			s.TCPMode = str(mode)
		}
		c, err := config.NewCheck(t.Context(), "c", s, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		c        *config.Check
		synReady bool
		want     string // "http", "connect", "syn" or "error"
	}{
		{"http", check("http", ""), true, "http"},
		{"https", check("https", ""), false, "http"},
		{"tcp auto with syn", check("tcp", ""), true, "syn"},
		{"tcp auto without syn", check("tcp", ""), false, "connect"},
		{"tcp connect with syn", check("tcp", "connect"), true, "connect"},
		{"tcp syn with syn", check("tcp", "syn"), true, "syn"},
		{"tcp syn without syn", check("tcp", "syn"), false, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, useSyn, err := New(t.Context(), tc.c, tc.synReady)
			got := "error"
			switch {
			case err != nil:
				if !errors.Is(err, ErrNoSyn) {
					t.Errorf("error %v does not wrap ErrNoSyn", err)
				}
			case useSyn && p == nil:
				got = "syn"
			case !useSyn:
				switch p.(type) {
				case *httpprobe.Prober:
					got = "http"
				case *tcp.Prober:
					got = "connect"
				}
			}
			if got != tc.want {
				t.Errorf("got %s (prober %T, useSyn %v, err %v), want %s", got, p, useSyn, err, tc.want)
			}
		})
	}
}
