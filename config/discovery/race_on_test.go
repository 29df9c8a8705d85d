//go:build race

package discovery

// raceEnabled is true when tests run under the race detector, which makes
// reading and decoding tenfold slower and changes what the heap holds: the
// tests that measure memory then skip.
const raceEnabled = true
