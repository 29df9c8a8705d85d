//go:build nokubernetes && noconsul

package kinds

import (
	"errors"
	"slices"
	"testing"

	"github.com/sondeprobe/sonde/config"
)

// TestSlimBuild: built with the tags that leave Kubernetes and Consul out,
// sonde has the other kinds, and a config naming one left out is refused
// with the kind named.
func TestSlimBuild(t *testing.T) {
	t.Parallel()
	if got, want := Names(), []string{"dns", "file", "http", "static"}; !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	for key, want := range map[string]string{
		"kubernetes_sd_configs: [{role: pod}]":          "pools[0].kubernetes_sd_configs: kubernetes discovery is not built into this program, which has static, file, http and dns",
		"consul_sd_configs: [{server: 127.0.0.1:8500}]": "pools[0].consul_sd_configs: consul discovery is not built into this program, which has static, file, http and dns",
	} {
		_, err := config.Parse([]byte("checks: {web: {protocol: http}}\npools:\n  - name: p\n    check: web\n    "+key+"\n"), "", config.LoadOptions{})
		if err == nil || err.Error() != want || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: error %v, want %q", key, err, want)
		}
	}
}
