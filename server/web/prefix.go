package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// RoutePrefix checks and normalises a route prefix (sonde run -web.route-prefix): "" or a path
// starting with "/", without a trailing "/" ("/" itself is "").
func RoutePrefix(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	u, err := url.Parse(p)
	if err != nil || !strings.HasPrefix(p, "/") || u.Path != p || u.RawQuery != "" || u.Fragment != "" || strings.Contains(p, "//") {
		return "", fmt.Errorf("%q: want a path such as /sonde", p)
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%q: want a path without . or .. segments", p)
		}
	}
	return p, nil
}

// WithPrefix serves h under prefix: PREFIX/x is h's /x, PREFIX redirects to
// PREFIX/, and anything else is not found.
func WithPrefix(prefix string, h http.Handler) http.Handler {
	strip := http.StripPrefix(prefix, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == prefix:
			to := prefix + "/"
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, to, http.StatusFound)
		case strings.HasPrefix(r.URL.Path, prefix+"/"):
			strip.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("not found: sonde serves under %s/", prefix), http.StatusNotFound)
		}
	})
}
