package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestStreamList checks that a streamed list is one JSON object: the
// items, in order, then the tail's fields.
func TestStreamList(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 3} {
		rec := httptest.NewRecorder()
		StreamList(rec, "items", func(emit func(any) error) error {
			for i := range n {
				if err := emit(map[string]int{"i": i}); err != nil {
					return err
				}
			}
			return nil
		}, func(field func(string, any) error) error {
			return field("next", "c<&>")
		})
		var got struct {
			Items []struct{ I int }
			Next  string
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%d items: %v\n%s", n, err, rec.Body)
		}
		if len(got.Items) != n || got.Next != "c<&>" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%d items: %+v, %q", n, got, rec.Header().Get("Content-Type"))
		}
		for i, it := range got.Items {
			if it.I != i {
				t.Errorf("item %d is %d", i, it.I)
			}
		}
	}
}

func TestWantsStream(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{"text/event-stream"}, true},
		{[]string{"application/json;q=0.9, TEXT/Event-Stream ; q=0.1"}, true},
		{[]string{"application/json", "text/event-stream"}, true},
		{[]string{"text/event-streams"}, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, a := range c.accept {
			r.Header.Add("Accept", a)
		}
		if got := WantsStream(r); got != c.want {
			t.Errorf("Accept %q: WantsStream = %v, want %v", c.accept, got, c.want)
		}
	}
}
