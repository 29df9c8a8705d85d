//go:build race

package scheduler

// raceEnabled is true when tests run under the race detector, which slows
// pure simulations tenfold; such tests then run fewer random trials.
const raceEnabled = true
