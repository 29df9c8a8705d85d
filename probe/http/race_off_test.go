//go:build !race

package http

const raceEnabled = false
