package discovery

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/prometheus/model/labels"
)

// jsonContentType is what an HTTP SD answer's Content-Type must be: JSON,
// in UTF-8 if it says.
var jsonContentType = regexp.MustCompile(`^(?i:application/json(;\s*charset=("utf-8"|utf-8))?)$`)

// httpFeed runs an http_sd_configs source: it asks the server at start and
// every refresh interval, as Prometheus's HTTP discovery does (GET, status
// 200, a JSON content type, the refresh interval in
// X-Prometheus-Refresh-Interval-Seconds, "__meta_url" on each group), with
// two differences: an answer may hold at most MaxDocumentBytes, read as a
// stream of groups, and a request ends after a refresh interval, or a
// minute if that is longer (Prometheus waits for as long as the server
// takes).
type httpFeed struct {
	cfg    *HTTPSD
	client *http.Client
}

func newHTTPFeed(cfg *HTTPSD) (*httpFeed, error) {
	client, err := commoncfg.NewClientFromConfig(cfg.HTTPClientConfig, "http")
	if err != nil {
		return nil, err
	}
	return &httpFeed{cfg: cfg, client: client}, nil
}

// minHTTPTimeout is the least time an HTTP SD request may take, however
// short the refresh interval: a large answer takes seconds to read.
const minHTTPTimeout = time.Minute

func (h *httpFeed) run(ctx context.Context, out feedOut) {
	every := h.cfg.RefreshInterval
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		c, err := h.fetch(ctx, max(every, minHTTPTimeout))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			out.fail(err.Error())
		default:
			out.send(map[string]*chunk{h.cfg.URL: c})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// fetch asks the server once, for at most timeout.
func (h *httpFeed) fetch(ctx context.Context, timeout time.Duration) (*chunk, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.cfg.URL, http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "sonde")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Prometheus-Refresh-Interval-Seconds", strconv.FormatFloat(h.cfg.RefreshInterval.Seconds(), 'f', -1, 64))
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close() // not drained: the rest of a refused answer is not worth reading
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("server returned HTTP status %s", resp.Status)
	}
	if ct := strings.TrimSpace(resp.Header.Get("Content-Type")); !jsonContentType.MatchString(ct) {
		return nil, fmt.Errorf("unsupported content type %q", ct)
	}
	if resp.ContentLength > MaxDocumentBytes {
		return nil, fmt.Errorf("answer %w of %d bytes: %d bytes", ErrTooLarge, MaxDocumentBytes, resp.ContentLength)
	}
	c, err := readJSON(newCappedReader(resp.Body, MaxDocumentBytes), labels.FromStrings("__meta_url", h.cfg.URL))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return c, nil
}
