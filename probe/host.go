package probe

import "strings"

// ValidHostName reports whether s is a DNS host name as sonde accepts one
// everywhere (targets, Host headers, TLS server names): dot-separated labels
// of 1..63 letters, digits, '-' or '_', none starting or ending with '-', 253
// characters at most, an optional trailing dot, and a last label that is not
// all digits, so that a malformed IPv4 address is not taken for a name.
func ValidHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !isAlnum(c) && c != '-' && c != '_' {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
