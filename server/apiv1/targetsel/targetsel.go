// Package targetsel is how the API's lists and the status page's views
// select and name targets: the label= filters of a request, and the name of
// a target that has no address yet. Both surfaces import it, so a filter or
// a link means the same in the JSON API and on the page, and the API's
// lists need nothing of the page.
package targetsel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
)

// labelMatch is one label= filter: the label equals (or not) a value; a
// missing label is the empty value.
type labelMatch struct {
	name, value string
	equal       bool
}

// LabelMatches are the label= filters of a request, all of which a target
// must pass: the API's and the pool view's.
type LabelMatches []labelMatch

// ParseLabelMatches reads label= values, each NAME=VALUE or NAME!=VALUE
// (see config.ParseLabelMatch).
func ParseLabelMatches(vs []string) (LabelMatches, error) {
	var out LabelMatches
	for _, l := range vs {
		name, value, equal, err := config.ParseLabelMatch(l)
		if err != nil {
			return nil, fmt.Errorf("label=%w", err)
		}
		out = append(out, labelMatch{name, value, equal})
	}
	return out, nil
}

// Matches reports whether ls passes every filter.
func (ms LabelMatches) Matches(ls labels.Labels) bool {
	for _, m := range ms {
		if (ls.Get(m.name) == m.value) != m.equal {
			return false
		}
	}
	return true
}

// Unresolved names an unresolved target as the API and the pages do:
// "host:port", or the host alone when it has no port.
func Unresolved(u *discovery.Unresolved) string {
	return string(AppendHostPort(nil, u.Host, u.Port))
}

// AppendHostPort appends "host:port" ("[host]:port" for an IPv6 address) to
// b, or host alone when port is 0: how an unresolved target is named.
func AppendHostPort(b []byte, host string, port uint16) []byte {
	if port == 0 {
		return append(b, host...)
	}
	if strings.IndexByte(host, ':') >= 0 {
		b = append(append(append(b, '['), host...), ']')
	} else {
		b = append(b, host...)
	}
	return strconv.AppendUint(append(b, ':'), uint64(port), 10)
}
