// Package settings is the view of a resolved check that people read: its
// effective settings after the preset, its detection windows (W1–W3) and
// its probe rate, in seconds and per second, as `sonde config check`
// prints them (text and JSON) and the status page's target view shows
// them ([Of]). The text forms ([Check.ProbeText], [Check.EvaluationText])
// are written here once for both.
//
// The view is derived from package config's [config.Check] and adds
// nothing to it; the file model stays in package config.
package settings
