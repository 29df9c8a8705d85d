package server

import (
	"testing"
	"time"
)

// hang bounds the wait for a call that must not block; reaching it is the
// failure a test looks for, never its normal path.
const hang = 10 * time.Second

// returnsWithin runs fn and fails the test when it has not returned after
// hang (fn is left running).
func returnsWithin(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatalf("%s still blocks after %v", what, hang)
	}
}

// waitFor waits until ok holds, failing the test after hang.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still waiting for %s", hang, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
