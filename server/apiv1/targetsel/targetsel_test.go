package targetsel

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/config/discovery"
)

func TestLabelMatches(t *testing.T) {
	t.Parallel()
	ms, err := ParseLabelMatches([]string{"zone=a", "tier!=db", "canary="})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ls   labels.Labels
		want bool
	}{
		{labels.FromStrings("zone", "a"), true},
		{labels.FromStrings("zone", "a", "tier", "web"), true},
		{labels.FromStrings("zone", "a", "tier", "db"), false},
		{labels.FromStrings("zone", "b"), false},
		{labels.FromStrings("zone", "a", "canary", "yes"), false}, // canary= wants the label missing or empty
		{labels.EmptyLabels(), false},
	} {
		if got := ms.Matches(c.ls); got != c.want {
			t.Errorf("Matches(%v) = %v, want %v", c.ls, got, c.want)
		}
	}
	if !LabelMatches(nil).Matches(labels.FromStrings("x", "y")) {
		t.Error("no filter refuses a target")
	}
}

func TestParseLabelMatchesNamesTheBadValue(t *testing.T) {
	t.Parallel()
	_, err := ParseLabelMatches([]string{"zone=a", "zone"})
	if err == nil || !strings.HasPrefix(err.Error(), "label=") || !strings.Contains(err.Error(), `"zone"`) {
		t.Fatalf("error %v, want one naming label= and the value", err)
	}
}

func TestUnresolved(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host string
		port uint16
		want string
	}{
		{"api.test", 443, "api.test:443"},
		{"api.test", 0, "api.test"},
		{"2001:db8::1", 80, "[2001:db8::1]:80"},
	} {
		if got := Unresolved(&discovery.Unresolved{Host: c.host, Port: c.port}); got != c.want {
			t.Errorf("Unresolved(%q, %d) = %q, want %q", c.host, c.port, got, c.want)
		}
	}
}
