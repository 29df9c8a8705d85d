package remediate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/server/webhook"
)

// Firing is one action for one instance: the JSON document a command reads
// on stdin and a webhook receives.
type Firing struct {
	Seq              uint64        `json:"seq"` // the firing's record in /api/v1/remediations
	Time             time.Time     `json:"time"`
	Remediation      string        `json:"remediation"`
	Instance         string        `json:"instance"`          // the target address
	Pools            []string      `json:"pools"`             // the pools it is unhealthy in: every one of the remediation's that probe it
	UnhealthySince   time.Time     `json:"unhealthy_since"`   // when it turned unhealthy in the first of them, where its wait began
	UnhealthySeconds float64       `json:"unhealthy_seconds"` // how long since then
	Reason           string        `json:"reason"`            // outcome of its most recent failed probe
	Targets          []TargetState `json:"targets"`           // its targets in those pools
}

// TargetState is one target of a firing's instance, as its pool sees it.
type TargetState struct {
	Pool        string `json:"pool"`
	Target      string `json:"target"` // address:port
	LastOutcome string `json:"last_outcome"`
	LastStatus  int    `json:"last_status,omitempty"`
	Error       string `json:"error,omitempty"`
}

// env returns the environment variables a command gets besides sonde's
// own: SONDE_INSTANCE, SONDE_POOLS (comma-separated) and SONDE_REMEDIATION.
func (f *Firing) env() []string {
	return []string{
		"SONDE_INSTANCE=" + f.Instance,
		"SONDE_POOLS=" + strings.Join(f.Pools, ","),
		"SONDE_REMEDIATION=" + f.Remediation,
	}
}

// action runs one remediation's command and webhook.
type action struct {
	command []string
	timeout time.Duration
	sender  *webhook.Sender // nil without a webhook
}

// newAction prepares r's action, reading the webhook's secret; ctx bounds
// the read.
func newAction(ctx context.Context, r *config.Remediation, client *http.Client) (*action, error) {
	a := &action{command: r.Command, timeout: r.Timeout}
	if r.WebhookURL == "" {
		return a, nil
	}
	a.sender = &webhook.Sender{
		URL:       r.WebhookURL,
		Client:    client,
		Timeout:   r.Timeout,
		UserAgent: "sonde-remediation",
		Header:    http.Header{"X-Sonde-Remediation": {r.Name}},
	}
	if r.WebhookSecretFile != "" {
		secret, err := safefile.ReadSecret(ctx, r.WebhookSecretFile)
		if err != nil {
			return nil, fmt.Errorf("remediation %s: webhook: %w", r.Name, err)
		}
		a.sender.Secret = secret
	}
	return a, nil
}

// run runs the command, then posts the webhook, and returns what failed.
func (a *action) run(ctx context.Context, f *Firing) error {
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode firing: %w", err) // a bug: Firing always encodes
	}
	var errs []error
	if len(a.command) > 0 {
		if err := runCommand(ctx, a.command, a.timeout, body, f.env()); err != nil {
			errs = append(errs, fmt.Errorf("command: %w", err))
		}
	}
	if a.sender != nil {
		if _, err := a.sender.Post(ctx, body); err != nil {
			errs = append(errs, fmt.Errorf("webhook: %w", err))
		}
	}
	return errors.Join(errs...)
}

// maxOutput bounds the command output kept for an error message.
const maxOutput = 2048

// runCommand runs argv without a shell, body on its stdin and env added to
// sonde's environment, in a process group of its own that is killed when
// timeout passes or ctx ends. Its output is kept only to explain a failure.
func runCommand(ctx context.Context, argv []string, timeout time.Duration, body []byte, env []string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	cmd.Env = append(os.Environ(), env...)
	var out tail
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // children holding the output pipe open
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (after %v)", ctx.Err(), timeout)
	}
	if o := strings.TrimSpace(out.String()); o != "" {
		return fmt.Errorf("%s: %w: %s", argv[0], err, o)
	}
	return fmt.Errorf("%s: %w", argv[0], err)
}

// tail keeps the last maxOutput bytes written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > maxOutput {
		t.b = append(t.b[:0], t.b[len(t.b)-maxOutput:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }
