package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestConfigCheckShard: the shards' targets, streams and probe rates add up
// to the whole configuration's, and each report names its shard.
func TestConfigCheckShard(t *testing.T) {
	file := writeConfig(t, presetsConfig)
	type report struct {
		Shard, Shards, Targets int
		ProbeStreams           int `json:"probe_streams"`
		ProbeRate              struct {
			Endpoints int
			Total     float64
		} `json:"probe_rate"`
	}
	check := func(args ...string) report {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append([]string{"config", "check", "-json"}, append(args, file)...), &out, &errOut); err != nil {
			t.Fatalf("config check %v: %v (stderr %q)", args, err, errOut.String())
		}
		var r report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	whole := check()
	if whole.Shard != 0 || whole.Shards != 1 {
		t.Errorf("without -shard: shard %d of %d, want 0 of 1", whole.Shard, whole.Shards)
	}
	var sum report
	for i := range 3 {
		r := check("-shard", fmt.Sprintf("%d/3", i))
		if r.Shard != i || r.Shards != 3 {
			t.Errorf("-shard %d/3: report says shard %d of %d", i, r.Shard, r.Shards)
		}
		sum.Targets += r.Targets
		sum.ProbeStreams += r.ProbeStreams
		sum.ProbeRate.Endpoints += r.ProbeRate.Endpoints
		sum.ProbeRate.Total += r.ProbeRate.Total
	}
	if sum.Targets != whole.Targets || sum.ProbeStreams != whole.ProbeStreams || sum.ProbeRate.Endpoints != whole.ProbeRate.Endpoints ||
		fmt.Sprintf("%.6f", sum.ProbeRate.Total) != fmt.Sprintf("%.6f", whole.ProbeRate.Total) {
		t.Errorf("3 shards add up to %+v, the whole config is %+v", sum, whole)
	}

	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", "-shard", "2/3", file}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nshard 2/3: ") {
		t.Errorf("text output names no shard:\n%s", out.String())
	}
}

// TestShardFlagErrors: a bad -shard is exit 2 with the flag, the value and
// what is allowed, in run and config check alike.
func TestShardFlagErrors(t *testing.T) {
	file := writeConfig(t, presetsConfig)
	for _, tc := range []struct{ value, msg string }{
		{"3/3", `invalid value "3/3" for flag -shard: shard index 3 is out of range 0..2 for 3 shards`},
		{"0/0", `invalid value "0/0" for flag -shard: shard count 0 is out of range 1..1024`},
		{"1", `invalid value "1" for flag -shard: want i/N, shard i of N shards (0 <= i < N)`},
	} {
		for _, args := range [][]string{
			{"run", "-shard", tc.value, "-config", file},
			{"config", "check", "-shard", tc.value, file},
		} {
			var out, errOut bytes.Buffer
			err := run(context.Background(), args, &out, &errOut)
			if code := report(err, &errOut); code != exitUsage {
				t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
			}
			if !strings.Contains(errOut.String(), "sonde: "+tc.msg+"\n") {
				t.Errorf("%q: stderr lacks %q:\n%s", args, tc.msg, errOut.String())
			}
		}
	}
}
