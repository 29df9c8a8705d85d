package events

import "github.com/prometheus/client_golang/prometheus"

var (
	descHookEvents   = desc("sonde_webhook_events_total", "Events of event webhooks by result: delivered (accepted by the receiver) or dropped (queue full, batch refused, or daemon stopped).", "webhook", "result")
	descHookRequests = desc("sonde_webhook_requests_total", "Delivery attempts of event webhooks by result: success, failure (retried) or refused (a 4xx other than 408 and 429: the batch is dropped).", "webhook", "result")
	descHookQueued   = desc("sonde_webhook_queued_events", "Events waiting for delivery to an event webhook.", "webhook")
	descEventStreams = desc("sonde_event_streams", "Clients following /api/v1/events as a Server-Sent Events stream.")
	descStreamsDrop  = desc("sonde_event_streams_dropped_total", "Event stream clients dropped for reading too slowly.")
)

// collector produces, at scrape time, the metrics of the ways events
// leave the daemon: webhooks and event streams.
type collector struct {
	hooks   *HookSet
	streams *Streams
}

// NewCollector returns the collector of the metrics of hooks and streams.
func NewCollector(hooks *HookSet, streams *Streams) prometheus.Collector {
	return &collector{hooks: hooks, streams: streams}
}

// desc returns the descriptor of a metric without constant labels.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Describe sends every descriptor the collector may produce.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHookEvents, descHookRequests, descHookQueued, descEventStreams, descStreamsDrop} {
		ch <- d
	}
}

// Collect reads the running webhooks and streams.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, h := range c.hooks.List() {
		name := h.cfg.Name
		counter(descHookEvents, h.delivered.Load(), name, "delivered")
		counter(descHookEvents, h.dropped.Load(), name, "dropped")
		counter(descHookRequests, h.succeeded.Load(), name, "success")
		counter(descHookRequests, h.failed.Load(), name, "failure")
		counter(descHookRequests, h.refused.Load(), name, "refused")
		ch <- prometheus.MustNewConstMetric(descHookQueued, prometheus.GaugeValue, float64(h.queued()), name)
	}
	ch <- prometheus.MustNewConstMetric(descEventStreams, prometheus.GaugeValue, float64(c.streams.slots.InUse()))
	counter(descStreamsDrop, c.streams.dropped.Load())
}
