package server

import (
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// waitFor waits until ok holds, failing the test after testenv.Hang.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(testenv.Hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still waiting for %s", testenv.Hang, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
