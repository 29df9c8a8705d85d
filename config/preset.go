package config

import (
	"time"

	httpprobe "github.com/sondeprobe/sonde/probe/http"
	"github.com/sondeprobe/sonde/scheduler"
)

// Preset is the set of defaults and documented ranges of one health-check
// system (docs/semantics.md, "Presets"). A check names its preset with "preset:";
// every value a preset gives can be overridden in the check, and a value
// outside a range the system documents is a configuration error that names
// the preset.
//
// Only ranges the systems' own documents give are enforced beyond the global
// ones: App Service's failure count (2..10), Global Accelerator's interval
// (1s..50s), threshold (2..10) and path rules (H2), and the protocols each
// system offers. Fixed values of a system (such as Global Accelerator's 3 s
// timeout, T2) are defaults that sonde lets users change.
type Preset struct {
	Name                string
	Protocols           []Protocol // allowed protocols; the first is the default
	Method              string     // default HTTP method
	Path                string     // default path; "" means the user must give one
	Cadence             scheduler.Cadence
	Interval            time.Duration
	Timeout             time.Duration
	Rise, Fall          int              // consecutive thresholds (E1), used when Window is zero
	Window              scheduler.Window // sliding window (E2) when Size > 0
	Initial             scheduler.State
	Healthy             httpprobe.StatusCodes // healthy status codes of HTTP checks (H3)
	UserAgent           string                // "" lets the prober choose its own
	DefaultHost         string                // Host header of HTTP(S) checks without a host setting; "" means the target's name or address
	CheckPortWins       bool                  // the check's port, when set, overrides the targets' own ports
	FailOpen            bool                  // pool default for fail_open (P2)
	MaxUnhealthyPercent int                   // pool default for max_unhealthy_percent (P1)

	// Ranges the system documents; a zero range means only the global one applies.
	intervalRange  durRange
	thresholdRange intRange // applies to both rise and fall
	fallRange      intRange // applies to fall only
	strictPath     bool     // Global Accelerator's path rules (H2)
}

// Preset names.
const (
	PresetAppService        = "appservice"
	PresetFrontDoor         = "frontdoor"
	PresetAppGateway        = "appgateway"
	PresetGlobalAccelerator = "globalaccelerator"
)

// presetNames lists the presets in the order messages show them.
var presetNames = []string{PresetAppService, PresetFrontDoor, PresetAppGateway, PresetGlobalAccelerator}

// defaultPreset holds sonde's own defaults, for checks without a preset. Its
// Protocols list is empty: such a check must name its protocol.
var defaultPreset = Preset{
	Method:              "GET",
	Path:                "/",
	Interval:            10 * time.Second,
	Timeout:             3 * time.Second,
	Rise:                2,
	Fall:                3,
	Initial:             scheduler.Unknown,
	Healthy:             httpprobe.MustParseStatusCodes("200-299"),
	FailOpen:            true,
	MaxUnhealthyPercent: 100,
}

// LookupPreset returns the preset called name.
func LookupPreset(name string) (Preset, bool) {
	switch name {
	case PresetAppService:
		// Azure App Service: one ping a minute ("10 failed pings = 10 minutes":
		// a fixed rate), a ping that takes longer than a minute fails,
		// 200-299 healthy, removal after 10 failures
		// (WEBSITE_HEALTHCHECK_MAXPINGFAILURES 2..10), at most 50 % removed
		// (WEBSITE_HEALTHCHECK_MAXUNHEALTHYWORKERPERCENT 1..100), no default path.
		return Preset{
			Name: name, Protocols: []Protocol{HTTP, HTTPS}, Method: "GET", Cadence: scheduler.FixedRate,
			Interval: time.Minute, Timeout: time.Minute, Rise: 1, Fall: 10,
			Initial: scheduler.Unknown, Healthy: httpprobe.MustParseStatusCodes("200-299"),
			FailOpen: true, MaxUnhealthyPercent: 50,
			fallRange: intRange{2, 10},
		}, true
	case PresetFrontDoor:
		// Azure Front Door: HEAD by default for new profiles, a
		// probe every 30 s (a fixed rate: "two requests per minute"), only
		// 200 is healthy, UA "Edge Health Probe", SampleSize 4 and
		// SuccessfulSamplesRequired 2 (classic defaults, E7); all origins
		// failing means all get traffic. Probes go to the origin's own
		// port, which cannot be overridden.
		return Preset{
			Name: name, Protocols: []Protocol{HTTP, HTTPS}, Method: "HEAD", Path: "/", Cadence: scheduler.FixedRate,
			Interval: 30 * time.Second, Timeout: 30 * time.Second,
			Window:  scheduler.Window{Size: 4, Required: 2},
			Initial: scheduler.Unknown, Healthy: httpprobe.MustParseStatusCodes("200"),
			UserAgent: "Edge Health Probe", FailOpen: true, MaxUnhealthyPercent: 100,
		}, true
	case PresetAppGateway:
		// Azure Application Gateway: GET to "/", every 30 s with a 30 s timeout (a fixed
		// rate: "first detection 20 s + 2 failed probes × 20 s"), unhealthy
		// threshold 3, healthy at once on one success, unhealthy until the
		// first successful probe, 200-399 healthy. The default probe's URL
		// is <protocol>://127.0.0.1:<port>/, so its Host header is
		// 127.0.0.1; a custom probe's port, when defined, is used instead
		// of the backend setting's. Its documentation gives no ranges for
		// interval, timeout or threshold.
		return Preset{
			Name: name, Protocols: []Protocol{HTTP, HTTPS}, Method: "GET", Path: "/", Cadence: scheduler.FixedRate,
			Interval: 30 * time.Second, Timeout: 30 * time.Second, Rise: 1, Fall: 3,
			Initial: scheduler.Unhealthy, Healthy: httpprobe.MustParseStatusCodes("200-399"),
			DefaultHost: "127.0.0.1", CheckPortWins: true,
			FailOpen: false, MaxUnhealthyPercent: 100,
		}, true
	case PresetGlobalAccelerator:
		// Alibaba Cloud Global Accelerator: TCP, HTTP or HTTPS; interval 1..50 s, default 2 s,
		// counted after each check completes (the windows t*k + i*(k-1));
		// 3 s response timeout; one threshold for both directions 2..10,
		// default 3; path rules H2; port 1..65535.
		return Preset{
			Name: name, Protocols: []Protocol{TCP, HTTP, HTTPS}, Method: "GET", Path: "/", Cadence: scheduler.AfterCompletion,
			Interval: 2 * time.Second, Timeout: 3 * time.Second, Rise: 3, Fall: 3,
			Initial: scheduler.Unknown, Healthy: httpprobe.MustParseStatusCodes("200-399"),
			FailOpen: false, MaxUnhealthyPercent: 100,
			intervalRange:  durRange{time.Second, 50 * time.Second},
			thresholdRange: intRange{2, 10},
			strictPath:     true,
		}, true
	}
	return Preset{}, false
}
