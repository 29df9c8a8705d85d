package probe

import "testing"

func TestValidHostName(t *testing.T) {
	for s, want := range map[string]bool{
		"api.internal": true, "api.internal.": true, "a": true, "under_score.test": true, "x-1.example": true,
		"1a.example": true, "a.b2": true,
		"": false, ".": false, "a..b": false, "-a.test": false, "a-.test": false, "a b": false,
		"10.0.0.1": false, "10.0.0.300": false, "api.internal:80": false, "[::1]": false, "caf\u00e9.test": false,
	} {
		if got := ValidHostName(s); got != want {
			t.Errorf("ValidHostName(%q) = %v, want %v", s, got, want)
		}
	}
	long := ""
	for range 64 {
		long += "a"
	}
	if ValidHostName(long + ".test") {
		t.Error("a 64-character label is accepted")
	}
}
