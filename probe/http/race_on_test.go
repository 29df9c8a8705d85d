//go:build race

package http

// raceEnabled is true when tests run under the race detector, whose
// runtime allocates: allocation counts are then not the prober's.
const raceEnabled = true
