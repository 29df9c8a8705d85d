// Package ceiling is the same-run ceiling of `sonde bench`: a minimal SYN
// sender that sweeps a prefix as fast as the machine allows with sonde's own
// packets and cookies, and no scheduler, so that the sweeps of sonde are
// compared with what the same machine, kernel and fleet allow in the same run.
// [Sweep] runs one sweep.
package ceiling
