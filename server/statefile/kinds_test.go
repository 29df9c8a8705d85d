package statefile

// The tests load configurations with discovery lists, which the kinds
// built into the binary decode.
import _ "github.com/sondeprobe/sonde/config/discovery/kinds"
