package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestSecretFileExposed: a secret file other users can read is used, and
// said: a warning in the log at the load, the number of such warnings in
// sonde_config_warnings, a line on the status page. It used to be accepted
// without a word.
func TestSecretFileExposed(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "hook.secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	yaml := func(interval string) string {
		return fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: %s, timeout: 1s}
pools:
  - {name: web, check: web, targets: ["127.0.0.1:1"]}
webhooks:
  - {url: "http://127.0.0.1:1/", secret_file: %q}
`, interval, secret)
	}
	logs := &testenv.SyncBuffer{}
	td := startDaemonWith(t, yaml("1h"), func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	if v := metricValue(t, td.d.metrics.reg, "sonde_config_warnings", nil); v != 1 {
		t.Errorf("sonde_config_warnings = %v, want 1", v)
	}
	want := "webhooks[0].secret_file"
	if !strings.Contains(logs.String(), "configuration warning") || !strings.Contains(logs.String(), want) {
		t.Errorf("the log does not warn of %s:\n%s", want, logs.String())
	}
	if page := td.okPage(t, "/"); !strings.Contains(page, want) || !strings.Contains(page, "is open to users other than its owner and group") {
		t.Errorf("the overview does not warn of %s:\n%s", want, page)
	}

	if err := os.Chmod(secret, 0o640); err != nil {
		t.Fatal(err)
	}
	td.rewrite(t, yaml("2h"))
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, td.d.metrics.reg, "sonde_config_warnings", nil); v != 0 {
		t.Errorf("sonde_config_warnings = %v once the file is private, want 0", v)
	}
}
