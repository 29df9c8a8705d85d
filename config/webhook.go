package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// EventWebhookSpec is one entry of "webhooks" as written. See
// [EventWebhook].
type EventWebhookSpec struct {
	Name       *string          `yaml:"name"`
	URL        *string          `yaml:"url"`
	Events     *EventFilterSpec `yaml:"events"`
	SecretFile *string          `yaml:"secret_file"`
	Timeout    *Duration        `yaml:"timeout"`
}

// EventFilterSpec selects the events a webhook receives, as written.
type EventFilterSpec struct {
	Kinds []string `yaml:"kinds"`
	Pools []string `yaml:"pools"`
}

// EventKinds are the kinds of events sonde reports: a target's state change,
// a pool member's route, a change of the preferred set and a pool's
// fail-open, decided by the pool policy, and a trigger of passive evidence.
var EventKinds = []string{"state", "route", "preferred", "fail_open", "passive"}

// Limits and defaults of webhook settings.
const (
	DefaultWebhookTimeout = 10 * time.Second
	maxWebhookTimeout     = 5 * time.Minute
	maxURLLen             = 2048
)

// EventWebhook is one entry of "webhooks": an HTTP endpoint that receives the
// daemon's events as batches of JSON, and which of them.
type EventWebhook struct {
	// Name tells webhooks apart in metrics and logs: the name set, else the
	// URL's host:port.
	Name string
	// URL is where batches are POSTed, http or https.
	URL string
	// Kinds are the kinds of events sent (of [EventKinds]); empty for all.
	Kinds []string
	// Pools are the pools whose events are sent; empty for all. A state
	// event is sent when any pool of its target is listed.
	Pools []string
	// SecretFile is the path of a file whose content signs every request
	// (HMAC-SHA256); empty for unsigned requests.
	SecretFile string
	// Timeout bounds each delivery attempt.
	Timeout time.Duration
}

// Wants reports whether an event of kind for pools passes the webhook's
// filter.
func (w *EventWebhook) Wants(kind string, pools []string) bool {
	if len(w.Kinds) > 0 && !slices.Contains(w.Kinds, kind) {
		return false
	}
	if len(w.Pools) == 0 {
		return true
	}
	for _, p := range pools {
		if slices.Contains(w.Pools, p) {
			return true
		}
	}
	return false
}

// resolveWebhooks validates the "webhooks" entries against the config's
// pools.
func resolveWebhooks(specs []*EventWebhookSpec, files *fileReader, pools []*Pool) ([]*EventWebhook, error) {
	var out []*EventWebhook
	for i, s := range specs {
		field := fmt.Sprintf("webhooks[%d]", i)
		if s == nil {
			return nil, fieldErr(field, "empty entry")
		}
		w, err := resolveWebhook(field, s, files, pools)
		if err != nil {
			return nil, err
		}
		for j, prev := range out {
			if prev.Name == w.Name {
				what := "name"
				if s.Name == nil {
					what = "host of the url"
				}
				return nil, fieldErr(field+".name", "%q (the %s) is already the name of webhooks[%d]; set name to tell them apart", w.Name, what, j)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

func resolveWebhook(field string, s *EventWebhookSpec, files *fileReader, pools []*Pool) (*EventWebhook, error) {
	u, err := checkWebhookURL(field+".url", s.URL)
	if err != nil {
		return nil, err
	}
	w := &EventWebhook{Name: u.Host, URL: *s.URL, Timeout: pickDur(s.Timeout, DefaultWebhookTimeout)}
	if s.Name != nil {
		if !validName(*s.Name) {
			return nil, fieldErr(field+".name", "%q is not a valid name; want %s", *s.Name, nameRule)
		}
		w.Name = *s.Name
	}
	if err := checkDur(field+".timeout", w.Timeout, durRange{time.Millisecond, maxWebhookTimeout}, ""); err != nil {
		return nil, err
	}
	if s.SecretFile != nil {
		if w.SecretFile, err = files.secret(field+".secret_file", *s.SecretFile); err != nil {
			return nil, err
		}
	}
	if s.Events != nil {
		for j, k := range s.Events.Kinds {
			if !slices.Contains(EventKinds, k) {
				return nil, fieldErr(fmt.Sprintf("%s.events.kinds[%d]", field, j), "%q is not one of %s", k, strings.Join(EventKinds, ", "))
			}
		}
		for j, name := range s.Events.Pools {
			if !slices.ContainsFunc(pools, func(p *Pool) bool { return p.Name == name }) {
				return nil, fieldErr(fmt.Sprintf("%s.events.pools[%d]", field, j), "%q is not the name of a pool", name)
			}
		}
		w.Kinds, w.Pools = s.Events.Kinds, s.Events.Pools
	}
	return w, nil
}

// checkWebhookURL checks the url of a webhook, an event webhook's or a
// remediation's: one rule for both.
func checkWebhookURL(field string, s *string) (*url.URL, error) {
	if s == nil {
		return nil, fieldErr(field, "missing; want an http:// or https:// URL")
	}
	u, err := parseWebhookURL(*s)
	if err != nil {
		return nil, fieldErr(field, "%q %s", *s, err.Error())
	}
	return u, nil
}

// parseWebhookURL checks a webhook URL; the error says what is wrong after
// the quoted URL.
func parseWebhookURL(s string) (*url.URL, error) {
	if len(s) > maxURLLen {
		return nil, fmt.Errorf("is longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("has scheme %q; want http or https", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("has no host")
	case u.User != nil:
		return nil, fmt.Errorf("carries user information; sign requests with secret_file instead")
	case u.Fragment != "":
		return nil, fmt.Errorf("has a fragment, which is never sent")
	}
	return u, nil
}
