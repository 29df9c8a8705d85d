package testenv

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// DNSServer is a DNS server on loopback that answers from a table of
// records a test may change: NXDOMAIN for a name it has no record of, an
// empty answer for a name it has records of another type.
type DNSServer struct {
	// Addr is the address it listens on, UDP and TCP.
	Addr string

	mu   sync.Mutex
	rrs  map[string][]dns.RR // by "name. TYPE"
	asks map[string]int
}

// NewDNSServer serves records, written in zone-file syntax
// ("api.test. 30 IN A 192.0.2.1"), on addr ("127.0.0.1:0" for any port),
// until tb ends.
func NewDNSServer(tb testing.TB, addr string, records ...string) *DNSServer {
	tb.Helper()
	s := &DNSServer{asks: map[string]int{}}
	s.Set(tb, records...)
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	s.Addr = pc.LocalAddr().String()
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		pc.Close()
		tb.Fatal(err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: s}, {Listener: ln, Handler: s}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		tb.Cleanup(func() { srv.Shutdown() })
	}
	return s
}

// Set replaces the records.
func (s *DNSServer) Set(tb testing.TB, records ...string) {
	tb.Helper()
	rrs := map[string][]dns.RR{}
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			tb.Fatal(err)
		}
		k := strings.ToLower(rr.Header().Name) + " " + dns.TypeToString[rr.Header().Rrtype]
		rrs[k] = append(rrs[k], rr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rrs = rrs
}

// Asked returns how often name ("api.test.") was asked for.
func (s *DNSServer) Asked(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asks[name]
}

// ServeDNS answers one query.
func (s *DNSServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) == 1 {
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		s.mu.Lock()
		s.asks[name]++
		m.Answer = s.rrs[name+" "+dns.TypeToString[q.Qtype]]
		exists := false
		for k := range s.rrs {
			exists = exists || strings.HasPrefix(k, name+" ")
		}
		s.mu.Unlock()
		if !exists {
			m.Rcode = dns.RcodeNameError
		}
	}
	w.WriteMsg(m)
}
