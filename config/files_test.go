package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestSecretFileRefused: every secret file of a configuration (an auth
// token's, an event webhook's, a remediation webhook's) is read at the
// load as the daemon reads it, so a file it cannot use makes the
// configuration invalid, naming the field: one larger than a secret may be
// (refused by its size, never read: a 2 GiB file used to be hashed whole
// twice per load), an empty one, a FIFO (refused without waiting for a
// writer).
func TestSecretFileRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	writeFile(t, dir, "empty", " \n")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	places := []struct{ field, yaml string }{
		{"checks.web.auth_token.secret_file", "checks: {web: {protocol: http, auth_token: {secret_file: %s}}}\npools: [{name: p, check: web, targets: [127.0.0.1]}]\n"},
		{"webhooks[0].secret_file", "checks: {web: {protocol: http}}\npools: [{name: p, check: web, targets: [127.0.0.1]}]\nwebhooks: [{url: \"http://127.0.0.1:1/\", secret_file: %s}]\n"},
		{"remediation[0].webhook.secret_file", "checks: {web: {protocol: http}}\npools: [{name: p, check: web, targets: [127.0.0.1]}]\nremediation: [{name: r, pools: [p], webhook: {url: \"http://127.0.0.1:1/\", secret_file: %s}}]\n"},
	}
	files := []struct {
		name string
		want error
		msg  string
	}{
		{"big", safefile.ErrTooLarge, `"big": file too large: 2147483648 bytes, at most 65536 allowed`},
		{"empty", safefile.ErrEmptySecret, `"empty": secret file is empty`},
		{"fifo", nil, `"fifo" is not a regular file`},
	}
	for _, p := range places {
		for _, f := range files {
			t.Run(p.field+"/"+f.name, func(t *testing.T) {
				var err error
				testenv.ReturnsWithin(t, "the load", func() { _, err = Parse([]byte(fmt.Sprintf(p.yaml, f.name)), dir, testOptions()) })
				if want := p.field + ": " + f.msg; err == nil || err.Error() != want || f.want != nil && !errors.Is(err, f.want) {
					t.Fatalf("error %v, want %q", err, want)
				}
			})
		}
	}
}

// TestSecretFileWarnings: a secret file or TLS key that users other than
// its owner and group can read is used, with a warning naming the field; a
// CA file or certificate may be public.
func TestSecretFileWarnings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeCertFiles(t, dir, "client.pem", "client.key")
	writeCertFiles(t, dir, "ca.pem", "ca.key")
	writeFile(t, dir, "token", "t0ken\n")
	writeFile(t, dir, "hook", "h00k\n")
	for name, mode := range map[string]os.FileMode{"client.pem": 0o644, "client.key": 0o604, "ca.pem": 0o644, "token": 0o644, "hook": 0o640} {
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	cfg := mustParse(t, `
checks:
  web:
    protocol: https
    auth_token: {secret_file: token}
    tls: {ca_file: ca.pem, cert_file: client.pem, key_file: client.key}
pools: [{name: p, check: web, targets: [127.0.0.1]}]
webhooks: [{url: "http://127.0.0.1:1/", secret_file: hook}]
`, dir)
	var got []string
	for _, w := range cfg.Warnings {
		got = append(got, w.Field)
		if !strings.Contains(w.Msg, "is open to users other than its owner and group") {
			t.Errorf("warning %s does not say why", w)
		}
	}
	if diff := cmp.Diff([]string{"checks.web.auth_token.secret_file", "checks.web.tls.key_file"}, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
