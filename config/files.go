package config

import (
	"context"
	"fmt"
	"io/fs"
	"os"

	"github.com/sondeprobe/sonde/internal/safefile"
)

// Warning is something about a valid configuration that its operator
// should fix: a secret file other users can read. The daemon logs the
// warnings of every load and counts them in a metric; sonde config check
// prints them.
type Warning struct {
	Field string // the field, as in a FieldError
	Msg   string
}

// String returns "FIELD: MSG".
func (w Warning) String() string { return w.Field + ": " + w.Msg }

// fileReader reads the files a configuration names as it is resolved —
// secrets, TLS certificates and keys — relative to the configuration's
// directory, through package safefile (regular files only, opened without
// waiting, bounded, given up when ctx ends), and gathers the warnings about
// them.
type fileReader struct {
	ctx      context.Context
	dir      string // "" for the current directory
	warnings []Warning
}

// path returns p, as the configuration gives it, relative to its directory.
func (r *fileReader) path(p string) string { return resolvePath(r.dir, p) }

// stat checks that the file p (as written; abs is where it is) exists and
// is a regular file.
func (r *fileReader) stat(field, p, abs string) (fs.FileInfo, error) {
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, &FieldError{Field: field, Msg: fmt.Sprintf("%q: %s", p, errText(err)), Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, fieldErr(field, "%q is not a regular file", p)
	}
	return fi, nil
}

// private checks a file that holds a key (a secret file, a TLS private
// key): a regular file, with a warning when users other than its owner and
// group may read or write it. sonde still uses it: Kubernetes mounts
// secrets readable by all by default, where the container's one user is the
// only one to see them.
func (r *fileReader) private(field, p, abs string) error {
	fi, err := r.stat(field, p, abs)
	if err != nil {
		return err
	}
	if safefile.Exposed(fi.Mode()) {
		r.warnings = append(r.warnings, Warning{Field: field,
			Msg: fmt.Sprintf("%q is open to users other than its owner and group (mode %v); make it private (chmod o-rwx)", p, fi.Mode().Perm())})
	}
	return nil
}

// secret checks the secret file p of field and returns where it is: a
// private file ([fileReader.private]) that [safefile.ReadSecret] accepts,
// as the daemon reads it.
func (r *fileReader) secret(field, p string) (string, error) {
	abs := r.path(p)
	if err := r.private(field, p, abs); err != nil {
		return "", err
	}
	if _, err := safefile.ReadSecret(r.ctx, abs); err != nil {
		return "", r.readErr(field, p, err)
	}
	return abs, nil
}

// readErr is the error of field, whose file p could not be read.
func (r *fileReader) readErr(field, p string, err error) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf("%q: %s", p, errText(err)), Err: err}
}

// readFiles lists, each once, the files a configuration read: the targets
// files, then the TLS and secret files of the checks, then the webhook
// secret files of the remediations, then the secret files of the event
// webhooks, each with the cap it is read with. A file named for two uses
// gets the larger cap.
func readFiles(checks []*Check, rems []*Remediation, hooks []*EventWebhook, targetsFiles []string) []safefile.File {
	var files []safefile.File
	at := map[string]int{}
	add := func(p string, limit int64) {
		if p == "" {
			return
		}
		if i, ok := at[p]; ok {
			files[i].Max = max(files[i].Max, limit)
			return
		}
		at[p] = len(files)
		files = append(files, safefile.File{Path: p, Max: limit})
	}
	for _, p := range targetsFiles {
		add(p, safefile.MaxTargets)
	}
	for _, c := range checks {
		add(c.AuthToken.SecretFile, safefile.MaxSecret)
		add(c.TLS.CAFile, safefile.MaxPEM)
		add(c.TLS.CertFile, safefile.MaxPEM)
		add(c.TLS.KeyFile, safefile.MaxSecret)
	}
	for _, r := range rems {
		add(r.WebhookSecretFile, safefile.MaxSecret)
	}
	for _, w := range hooks {
		add(w.SecretFile, safefile.MaxSecret)
	}
	return files
}
