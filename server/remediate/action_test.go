package remediate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/webhook"
)

// script writes an executable shell script (run directly by the kernel's
// #! handling: sonde itself starts no shell) and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "act")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func testFiring() *Firing {
	return &Firing{Seq: 7, Remediation: "plan-a", Instance: "10.0.0.1", Pools: []string{"app-a", "app-b"}, UnhealthySeconds: 3600, Reason: "timeout"}
}

// TestCommand checks what a command gets: its arguments as given (no
// shell: a ';' is an argument), the firing on stdin, the environment
// variables; and that a failure says why, with the command's output.
func TestCommand(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	prog := script(t, `{ echo "args=$*"; echo "env=$SONDE_INSTANCE $SONDE_POOLS $SONDE_REMEDIATION"; cat; } > "$1"`+"\n")
	a := &action{command: []string{prog, out, ";", "true"}, timeout: 10 * time.Second}
	if err := a.run(context.Background(), testFiring()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if lines[0] != "args="+out+" ; true" || lines[1] != "env=10.0.0.1 app-a,app-b plan-a" {
		t.Fatalf("command saw %q", lines[:2])
	}
	var f Firing
	if err := json.Unmarshal([]byte(lines[2]), &f); err != nil || f.Instance != "10.0.0.1" || f.Seq != 7 || f.Reason != "timeout" {
		t.Fatalf("stdin %q: %+v, %v", lines[2], f, err)
	}

	a = &action{command: []string{script(t, "echo replace failed: no capacity >&2\nexit 3\n")}, timeout: 10 * time.Second}
	err = a.run(context.Background(), testFiring())
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "replace failed: no capacity") {
		t.Fatalf("failing command: %v, want its exit status and output", err)
	}
	a = &action{command: []string{filepath.Join(t.TempDir(), "missing")}, timeout: time.Second}
	if err := a.run(context.Background(), testFiring()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing program: %v, want not exist", err)
	}
}

// TestCommandTimeout checks that a hanging command and the children it
// started are killed at the timeout: the background child, whose PID the
// script writes first, is gone soon after run returns.
func TestCommandTimeout(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	a := &action{command: []string{script(t, `sleep 60 & echo $! > "$1"`+"\nsleep 60\n"), pidFile}, timeout: 2 * time.Second}
	start := time.Now()
	err := a.run(context.Background(), testFiring())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging command: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the command was stopped after %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the script wrote no child PID within the timeout: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("child PID %q: %v", b, err)
	}
	// SIGKILL is sent to the group before run returns; the child may take a
	// moment to die, and once orphaned it is reaped by init, which may never
	// come: a zombie is dead too.
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // do not leave it behind
		}
	})
	testenv.Eventually(t, fmt.Sprintf("the command's background child %d gone after the timeout", pid), func() (bool, bool) {
		a := alive(pid)
		return a, !a
	})
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false // gone between the two looks
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// TestWebhook checks the webhook: the same JSON, signed with the secret
// from the file, retried while the receiver fails.
func TestWebhook(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "hook.key")
	if err := os.WriteFile(secret, []byte("k3y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	calls := 0
	got := make(chan Firing, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if !webhook.Verify([]byte("k3y"), body, r.Header.Get(webhook.SignatureHeader)) || r.Header.Get("X-Sonde-Remediation") != "plan-a" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		var f Firing
		_ = json.Unmarshal(body, &f)
		got <- f
	}))
	t.Cleanup(srv.Close)
	a, err := newAction(t.Context(), &config.Remediation{Name: "plan-a", WebhookURL: srv.URL, WebhookSecretFile: secret, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.sender.Sleep = func(context.Context, time.Duration) error { return nil }
	if err := a.run(context.Background(), testFiring()); err != nil {
		t.Fatal(err)
	}
	if f := <-got; f.Instance != "10.0.0.1" || calls != 2 {
		t.Fatalf("received %+v after %d calls, want the firing on the second", f, calls)
	}
	if _, err := newAction(t.Context(), &config.Remediation{Name: "x", WebhookURL: srv.URL, WebhookSecretFile: filepath.Join(t.TempDir(), "gone")}, nil); err == nil {
		t.Fatal("a missing secret file was accepted")
	}
}
