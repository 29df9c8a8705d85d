package config

import (
	"maps"
	"net/netip"
	"reflect"
	"testing"
	"time"

	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/scheduler"
)

// keyTestCheck has a value in every probe setting, so that each can be
// changed to another.
func keyTestCheck() *Check {
	return &Check{
		Name: "c", Port: 80,
		Probe: Probe{
			Protocol: HTTPS, IPFamily: IP4, SourceAddress: netip.MustParseAddr("192.0.2.1"), TCPMode: TCPAuto,
			Method: "GET", Path: "/health", HealthyStatus: httpprobe.MustParseStatusCodes("200-299"), BodyContains: "ok",
			MaxBodyBytes: 1024, Host: "api.internal", DefaultHost: "127.0.0.1", SNI: "api.internal", UserAgent: "sonde",
			Headers:   map[string]string{"X-Probe": "1"},
			AuthToken: AuthToken{SecretFile: "/etc/secret", SecretEnv: "SECRET"},
			TLS:       httpprobe.TLSOptions{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"},
		},
		Timing: scheduler.Timing{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3},
	}
}

// others returns values of v's type that differ from v, or nil when the
// test does not know how to change such a value.
func others(v reflect.Value) []reflect.Value {
	switch x := v.Interface().(type) {
	case netip.Addr:
		return []reflect.Value{reflect.ValueOf(x.Next()), reflect.ValueOf(netip.Addr{})}
	case httpprobe.StatusCodes:
		return []reflect.Value{reflect.ValueOf(httpprobe.MustParseStatusCodes("200-300")), reflect.ValueOf(httpprobe.StatusCodes{})}
	case map[string]string:
		added, changed := maps.Clone(x), maps.Clone(x)
		added["X-Other"] = ""
		for k := range changed {
			changed[k] += "x"
		}
		return []reflect.Value{reflect.ValueOf(added), reflect.ValueOf(changed), reflect.ValueOf(map[string]string(nil))}
	}
	alt := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.String:
		alt.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		alt.SetInt(v.Int() + 1)
	case reflect.Uint8, reflect.Uint16:
		alt.SetUint(v.Uint() + 1)
	case reflect.Bool:
		alt.SetBool(!v.Bool())
	default:
		return nil
	}
	return []reflect.Value{alt}
}

// eachSetting calls fn with the path and value of every leaf setting below
// v: a field whose value [others] can change. It fails the test on a field
// it can neither change nor walk into.
func eachSetting(t *testing.T, path string, v reflect.Value, fn func(path string, v reflect.Value)) {
	t.Helper()
	if others(v) != nil {
		fn(path, v)
		return
	}
	if v.Kind() != reflect.Struct {
		t.Fatalf("%s: the test cannot change a %s; teach others() how", path, v.Type())
	}
	for i := range v.NumField() {
		eachSetting(t, path+"."+v.Type().Field(i).Name, v.Field(i), fn)
	}
}

// TestProbeKeyCoversEveryField changes every setting of Probe, one at a
// time, and checks that the probe key changes with it: a setting added to
// Probe is part of the key without anyone listing it. It walks the struct
// with reflect, so the new setting is also part of this test.
func TestProbeKeyCoversEveryField(t *testing.T) {
	t.Parallel()
	c := keyTestCheck()
	key := c.ProbeKey()
	n := 0
	eachSetting(t, "Probe", reflect.ValueOf(&c.Probe).Elem(), func(path string, v reflect.Value) {
		old := reflect.New(v.Type()).Elem()
		old.Set(v)
		for _, alt := range others(v) {
			v.Set(alt)
			if c.ProbeKey() == key {
				t.Errorf("changing %s to %v leaves the probe key as it was", path, alt)
			}
			n++
		}
		v.Set(old)
		if c.ProbeKey() != key {
			t.Fatalf("%s set back, the key differs: the key is not a function of the settings", path)
		}
	})
	if want := reflect.TypeFor[Probe]().NumField(); n < want {
		t.Errorf("changed %d settings, fewer than the %d fields of Probe", n, want)
	}
	c.Timeout++
	if c.ProbeKey() == key {
		t.Error("changing the timeout leaves the probe key as it was")
	}
}

// TestProbeKeyIgnoresTiming checks the other side: timing, evaluation and
// the check's name and default port are not part of the probe, so checks
// that differ only in them share probe streams (P4).
func TestProbeKeyIgnoresTiming(t *testing.T) {
	t.Parallel()
	c := keyTestCheck()
	key := c.ProbeKey()
	eachSetting(t, "Timing", reflect.ValueOf(&c.Timing).Elem(), func(path string, v reflect.Value) {
		if path == "Timing.Timeout" {
			return
		}
		old := reflect.New(v.Type()).Elem()
		old.Set(v)
		v.Set(others(v)[0])
		if c.ProbeKey() != key {
			t.Errorf("changing %s changes the probe key", path)
		}
		v.Set(old)
	})
	c.Name, c.Preset, c.Port = "d", PresetAppGateway, 8080
	if c.ProbeKey() != key {
		t.Error("the check's name, preset or port changes the probe key")
	}
}

// TestProbeKeyNoAmbiguity checks that strings cannot run into each other.
func TestProbeKeyNoAmbiguity(t *testing.T) {
	t.Parallel()
	a, b := keyTestCheck(), keyTestCheck()
	a.Method, a.Path = "GET", "/x"
	b.Method, b.Path = "GET/", "x"
	a.Headers, b.Headers = map[string]string{"A": "bc"}, map[string]string{"Ab": "c"}
	if a.ProbeKey() == b.ProbeKey() {
		t.Error("different settings give one key")
	}
}

func TestHTTPOptions(t *testing.T) {
	c := keyTestCheck()
	c.AuthToken = AuthToken{SecretEnv: "SONDE_TEST_TOKEN_OPTIONS"}
	t.Setenv("SONDE_TEST_TOKEN_OPTIONS", "s3cret")
	o, err := c.HTTPOptions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if o.Scheme != "https" || o.Method != "GET" || o.Path != "/health" || o.Body != "ok" || o.MaxBodyBytes != 1024 ||
		o.Host != "api.internal" || o.DefaultHost != "127.0.0.1" || o.SNI != "api.internal" || o.UserAgent != "sonde" || o.Headers.Get("X-Probe") != "1" ||
		o.TLS != c.TLS || o.Source != c.SourceAddress || o.Token.IsZero() || !o.Healthy.Contains(204) || o.Healthy.Contains(300) {
		t.Errorf("options %+v do not carry the check's settings", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("options of a valid check: %v", err)
	}
	c.AuthToken = AuthToken{SecretEnv: "SONDE_TEST_TOKEN_UNSET"}
	if _, err := c.HTTPOptions(t.Context()); err == nil {
		t.Error("HTTPOptions with an unset secret variable succeeded")
	}
	if got := c.TCPOptions(); got.Source != c.SourceAddress {
		t.Errorf("TCPOptions source %v, want %v", got.Source, c.SourceAddress)
	}
}
