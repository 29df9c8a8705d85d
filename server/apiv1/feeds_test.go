package apiv1

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/server/events"
	"github.com/sondeprobe/sonde/server/remediate"
	"github.com/sondeprobe/sonde/server/web/api"
)

// fakeFeeds is the daemon's Feeds without a daemon: an event log, and the
// discovery and remediations it is given.
type fakeFeeds struct {
	log       *events.Log
	streamed  int
	discovery []discovery.PoolStatus
	remedies  remediate.Status
}

func (f *fakeFeeds) Window(since uint64, limit int) (from, end, lost uint64) {
	return f.log.Window(since, limit)
}

func (f *fakeFeeds) CopyRange(from, end uint64, buf []api.Event) ([]api.Event, bool) {
	return f.log.CopyRange(from, end, buf)
}

func (f *fakeFeeds) ServeStream(w http.ResponseWriter, _ *http.Request) {
	f.streamed++
	fmt.Fprintln(w, "stream")
}

func (f *fakeFeeds) Discovery() []discovery.PoolStatus { return f.discovery }
func (f *fakeFeeds) Remediations() remediate.Status    { return f.remedies }

// serve answers a GET of path from the API over feeds alone (no
// configuration runs), admitting list requests with enter.
func serve(feeds Feeds, enter func(http.ResponseWriter) (http.ResponseWriter, func()), path string, header ...string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	New(func() Snapshot { return nil }, feeds, enter).Routes(mux)
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec
}

// TestEventsPoll pages through the event log: since= and limit=, next to
// ask with, and lost counting what fell out of the ring before a poll.
func TestEventsPoll(t *testing.T) {
	t.Parallel()
	f := &fakeFeeds{log: events.NewLog(4)}
	for i := range 6 { // the ring keeps events 3..6
		f.log.Add(api.Event{Kind: api.KindState, Target: fmt.Sprintf("192.0.2.%d:80", i+1)})
	}
	for _, c := range []struct {
		path       string
		seqs       []uint64
		next, lost uint64
	}{
		{"/api/v1/events", []uint64{3, 4, 5, 6}, 6, 2},
		{"/api/v1/events?since=3&limit=2", []uint64{4, 5}, 5, 0},
		{"/api/v1/events?since=5&limit=0", []uint64{6}, 6, 0},
		{"/api/v1/events?since=6", nil, 6, 0},
		{"/api/v1/events?since=99", nil, 6, 0}, // beyond the newest (a restarted daemon): start again from the present
	} {
		rec := serve(f, admitAll, c.path)
		var page api.EventsPage
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", c.path, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatalf("GET %s: %v\n%s", c.path, err, rec.Body)
		}
		var seqs []uint64
		for _, e := range page.Events {
			seqs = append(seqs, e.Seq)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(c.seqs) || page.Next != c.next || page.Lost != c.lost || page.Events == nil {
			t.Errorf("GET %s: events %v next %d lost %d, want %v next %d lost %d (and a list, not null)",
				c.path, seqs, page.Next, page.Lost, c.seqs, c.next, c.lost)
		}
	}
	if f.streamed != 0 {
		t.Errorf("a poll was streamed")
	}
}

// TestEventsPollRefusals: a bad since= or limit= is a 400 naming it, and a
// poll without a free list slot is answered by the admission alone.
func TestEventsPollRefusals(t *testing.T) {
	t.Parallel()
	f := &fakeFeeds{log: events.NewLog(4)}
	for _, c := range []struct{ path, want string }{
		{"/api/v1/events?since=x", `since="x"`},
		{"/api/v1/events?since=-1", `since="-1"`},
		{"/api/v1/events?limit=10001", `limit="10001"`},
		{"/api/v1/events?limit=-1", `limit="-1"`},
	} {
		if rec := serve(f, admitAll, c.path); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("GET %s: %d %q, want 400 naming %s", c.path, rec.Code, rec.Body, c.want)
		}
	}
	full := func(w http.ResponseWriter) (http.ResponseWriter, func()) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return w, nil
	}
	if rec := serve(f, full, "/api/v1/events"); rec.Code != http.StatusServiceUnavailable || strings.TrimSpace(rec.Body.String()) != "busy" {
		t.Errorf("a poll without a slot: %d %q, want the admission's 503 alone", rec.Code, rec.Body)
	}
}

// TestEventsStreamGoesToTheFeeds: a client that accepts text/event-stream
// is streamed to, whatever else it accepts, and takes no list slot.
func TestEventsStreamGoesToTheFeeds(t *testing.T) {
	t.Parallel()
	f := &fakeFeeds{log: events.NewLog(4)}
	refuse := func(w http.ResponseWriter) (http.ResponseWriter, func()) {
		t.Error("a stream took a list slot")
		return w, nil
	}
	rec := serve(f, refuse, "/api/v1/events", "Accept", "application/json;q=0.5, Text/Event-Stream")
	if f.streamed != 1 || rec.Body.String() != "stream\n" {
		t.Errorf("streamed %d times, body %q", f.streamed, rec.Body)
	}
}

// TestDiscoveryAndRemediations answer from the feeds: a daemon with no
// discovery lists no pools (an empty list, not null).
func TestDiscoveryAndRemediations(t *testing.T) {
	t.Parallel()
	f := &fakeFeeds{log: events.NewLog(4)}
	if rec := serve(f, admitAll, "/api/v1/discovery"); rec.Code != http.StatusOK || strings.Join(strings.Fields(rec.Body.String()), "") != `{"pools":[]}` {
		t.Errorf("no discovery: %d %s", rec.Code, rec.Body)
	}
	f.discovery = []discovery.PoolStatus{{Pool: "api"}}
	var d struct{ Pools []discovery.PoolStatus }
	if rec := serve(f, admitAll, "/api/v1/discovery"); rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &d) != nil || len(d.Pools) != 1 || d.Pools[0].Pool != "api" {
		t.Errorf("discovery: %d %s", rec.Code, rec.Body)
	}
	f.remedies = remediate.Status{Remediations: []remediate.RemediationStatus{}, Records: []remediate.Record{}}
	if rec := serve(f, admitAll, "/api/v1/remediations"); rec.Code != http.StatusOK || strings.Join(strings.Fields(rec.Body.String()), "") != `{"remediations":[],"records":[]}` {
		t.Errorf("remediations: %d %s", rec.Code, rec.Body)
	}
}
