package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// tinyStatic builds a small static Go program for amd64 into a directory
// laid out as -bin wants it, DIR/linux_amd64/sonde, and puts a copy at
// DIR/linux_arm64/sonde: an amd64 binary where arm64 belongs.
func tinyStatic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"tiny\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"amd64", "arm64"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "linux_"+a, "sonde"), src)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build a tiny static binary: %v\n%s", err, out)
		}
	}
	return dir
}

// validFlags are flags that inputs accepts, with the binaries in bin.
func validFlags(t *testing.T, bin string) flags {
	return flags{
		version: "1.2.0-3-g1a2b3c4d5e6f", revision: strings.Repeat("ab", 20), epoch: "1700000000",
		bin: bin, arches: "amd64", caBundle: "/etc/ssl/certs/ca-certificates.crt", out: t.TempDir(), root: "../..",
		source: defaultSource, maintainer: defaultMaintainer,
	}
}

func TestInputs(t *testing.T) {
	bin := tinyStatic(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	key := filepath.Join(dir, "key.pem")
	empty := filepath.Join(dir, "empty.pem")
	for name, text := range map[string]string{notPEM: "hello\n", key: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", empty: "\n"} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		set  func(*flags)
		want string // in the error; "" for none
	}{
		{"valid", func(*flags) {}, ""},
		{"tagged version", func(f *flags) { f.version = "1.2.0" }, ""},
		{"dirty version", func(f *flags) { f.version = "0.0.0-255-g756d9a8568fa-dirty" }, ""},
		{"v prefix", func(f *flags) { f.version = "v1.2.0" }, `-version "v1.2.0": want a digit`},
		{"empty version", func(f *flags) { f.version = "" }, `-version "": want a digit`},
		{"plus in version", func(f *flags) { f.version = "1.2.0+git" }, `-version "1.2.0+git"`},
		{"trailing hyphen", func(f *flags) { f.version = "1.2.0-" }, `-version "1.2.0-"`},
		{"short revision", func(f *flags) { f.revision = "756d9a8" }, `-revision "756d9a8": want a full commit hash`},
		{"epoch", func(f *flags) { f.epoch = "yesterday" }, `-epoch "yesterday": want seconds since 1970`},
		{"negative epoch", func(f *flags) { f.epoch = "-1" }, `-epoch "-1"`},
		{"unknown arch", func(f *flags) { f.arches = "amd64 riscv64" }, `unknown architecture "riscv64", want amd64 or arm64`},
		{"arch twice", func(f *flags) { f.arches = "amd64 amd64" }, "amd64 twice"},
		{"no arch", func(f *flags) { f.arches = " " }, "want at least one"},
		{"wrong machine", func(f *flags) { f.arches = "arm64" }, "want an executable for EM_AARCH64"},
		{"no binary", func(f *flags) { f.bin = dir }, "no such file"},
		{"http source", func(f *flags) { f.source = "http://x" }, "want an https:// URL"},
		{"maintainer", func(f *flags) { f.maintainer = "nobody" }, "want a name and <address>"},
		{"not PEM", func(f *flags) { f.caBundle = notPEM }, "text after certificate 0 is not PEM"},
		{"a key", func(f *flags) { f.caBundle = key }, `block 1 is a "PRIVATE KEY", want CERTIFICATE`},
		{"no certificates", func(f *flags) { f.caBundle = empty }, "no certificates"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := validFlags(t, bin)
			tt.set(&f)
			_, err := f.inputs()
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestCheckStaticDynamic: a dynamically linked program is refused.
func TestCheckStaticDynamic(t *testing.T) {
	sh, _ := filepath.EvalSymlinks(testenv.Tool(t, "sh", "dash"))
	if err := checkStatic(sh, knownArches["amd64"]); err == nil || !strings.Contains(err.Error(), "dynamically linked") && !strings.Contains(err.Error(), "want an executable") {
		t.Errorf("checkStatic(%s): %v, want it refused", sh, err)
	}
}
