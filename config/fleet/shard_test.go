package fleet

import (
	"net/netip"
	"testing"
)

func TestParseShard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Shard
		wantErr string
	}{
		{"0/1", Shard{0, 1}, ""},
		{"2/3", Shard{2, 3}, ""},
		{"1023/1024", Shard{1023, 1024}, ""},
		{"3/3", Shard{}, "shard index 3 is out of range 0..2 for 3 shards"},
		{"-1/3", Shard{}, "shard index -1 is out of range 0..2 for 3 shards"},
		{"0/0", Shard{}, "shard count 0 is out of range 1..1024"},
		{"0/1025", Shard{}, "shard count 1025 is out of range 1..1024"},
		{"1", Shard{}, "want i/N, shard i of N shards (0 <= i < N)"},
		{"", Shard{}, "want i/N, shard i of N shards (0 <= i < N)"},
		{"a/3", Shard{}, `shard index "a" is not a number; want i/N with i in 0..2`},
		{"1/x", Shard{}, `shard count "x" is not a number; want i/N with N in 1..1024`},
		{"1/3/4", Shard{}, `shard count "3/4" is not a number; want i/N with N in 1..1024`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseShard(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseShard(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseShard(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
	if s := (Shard{}); s.String() != "0/1" || !s.Owns(netip.MustParseAddrPort("198.18.0.1:80")) {
		t.Errorf("zero Shard is %s and does not own every target; want 0/1 owning all", s)
	}
}

// TestShardOfStable pins the hash: a change moves targets between shards
// when a fleet upgrades, which must be a decision, not an accident.
func TestShardOfStable(t *testing.T) {
	t.Parallel()
	want := map[string][5]int{ // shards of 2, 3, 4, 10 and 1024
		"198.18.0.1:80":     {1, 1, 3, 3, 616},
		"198.18.0.2:80":     {1, 1, 1, 1, 873},
		"198.18.0.1:443":    {1, 2, 2, 2, 167},
		"[2001:db8::1]:443": {0, 0, 0, 7, 418},
		"10.0.0.7:8080":     {1, 1, 1, 5, 851},
		"127.0.0.1:9123":    {0, 0, 0, 0, 853},
	}
	for ep, w := range want {
		a := netip.MustParseAddrPort(ep)
		var got [5]int
		for i, n := range []int{2, 3, 4, 10, 1024} {
			got[i] = ShardOf(a, n)
		}
		if got != w {
			t.Errorf("ShardOf(%s) over 2, 3, 4, 10, 1024 shards = %v, want %v", ep, got, w)
		}
	}
	// An IPv4 address is one endpoint however it is written.
	if a, b := netip.MustParseAddrPort("198.18.0.1:80"), netip.MustParseAddrPort("[::ffff:198.18.0.1]:80"); ShardOf(a, 7) != ShardOf(b, 7) {
		t.Error("IPv4 and IPv4-mapped forms of one endpoint land in different shards")
	}
}

// TestShardBalanceAndMovement checks rendezvous hashing over 20,000
// endpoints: shards get even slices, and going from N to N+1 shards moves
// about 1/(N+1) of the endpoints, every one of them to the new shard.
func TestShardBalanceAndMovement(t *testing.T) {
	t.Parallel()
	const endpoints = 20000
	eps := make([]netip.AddrPort, 0, endpoints)
	a := netip.MustParseAddr("10.0.0.0")
	for i := range endpoints {
		eps = append(eps, netip.AddrPortFrom(a, uint16(80+i%4)))
		if i%4 == 3 {
			a = a.Next()
		}
	}
	prev := make([]int, endpoints)
	for n := 1; n <= 8; n++ {
		counts := make([]int, n)
		moved := 0
		for i, ep := range eps {
			s := ShardOf(ep, n)
			counts[s]++
			if s != prev[i] {
				moved++
				if s != n-1 {
					t.Fatalf("%s moved from shard %d to %d going to %d shards; only the new shard %d may take targets", ep, prev[i], s, n, n-1)
				}
			}
			prev[i] = s
		}
		mean := float64(endpoints) / float64(n)
		for s, c := range counts {
			if d := float64(c)/mean - 1; d < -0.06 || d > 0.06 {
				t.Errorf("%d shards: shard %d has %d endpoints, more than 6 %% off the mean %.0f", n, s, c, mean)
			}
		}
		if n > 1 {
			share, want := float64(moved)/endpoints, 1/float64(n)
			if share < want-0.02 || share > want+0.02 {
				t.Errorf("going to %d shards moved %.1f %% of endpoints, want %.1f %% ± 2", n, 100*share, 100*want)
			}
		}
	}
}
