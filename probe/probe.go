// Package probe defines what every sonde prober shares: the outcome of a probe,
// the request a scheduler hands to a prober and the result it gets back, and the
// small interfaces that connect probers to the scheduler.
//
// Probers live in sub-packages: probe/syn (raw-socket TCP SYN with eBPF reply
// capture), probe/tcp (connect()) and probe/http (HTTP and HTTPS).
package probe

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Outcome is how one probe ended. Success is the only healthy outcome; every
// other value names the reason a probe failed, so results and metrics can tell a
// refused port from a silent one (docs/semantics.md T1) or a bad status from a bad body.
type Outcome uint8

// The outcomes of a probe. Their String values are the reasons shown in JSON
// output, logs and the outcome label of metrics.
const (
	Success         Outcome = iota // SYN-ACK, connection established, or an accepted HTTP response
	Refused                        // TCP RST: nothing listens on the port
	Timeout                        // no answer within the probe's timeout
	Unreachable                    // ICMP destination unreachable, or no route
	TLS                            // TLS handshake or certificate verification failed
	HTTPStatus                     // HTTP status outside the healthy set
	BodyMismatch                   // HTTP body lacks the required substring
	InvalidResponse                // the peer answered with something that is not HTTP
	Error                          // any other failure (resets mid-request, a cancelled probe)
	LocalError                     // this host could not run the probe (see LocalCause): no verdict on the target

	// NumOutcomes is the number of outcomes; arrays indexed by Outcome use it.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	Success:         "success",
	Refused:         "refused",
	Timeout:         "timeout",
	Unreachable:     "unreachable",
	TLS:             "tls",
	HTTPStatus:      "http_status",
	BodyMismatch:    "body_mismatch",
	InvalidResponse: "invalid_response",
	Error:           "error",
	LocalError:      "local_error",
}

// String returns the outcome's reason as used in output and metric labels.
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Healthy reports whether the outcome counts as a successful probe.
func (o Outcome) Healthy() bool { return o == Success }

// Verdict reports whether the outcome says something about the target:
// every outcome but LocalError, which says the prober's own host could not
// run the probe. Evaluators skip outcomes without a verdict.
func (o Outcome) Verdict() bool { return o != LocalError }

// ParseOutcome returns the outcome whose String is s.
func ParseOutcome(s string) (Outcome, error) {
	for o, name := range outcomeNames {
		if name == s {
			return Outcome(o), nil
		}
	}
	return 0, fmt.Errorf("unknown outcome %q", s)
}

// MarshalText encodes the outcome as its reason string.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Request asks a prober to probe one target once. Times are in the scheduler's
// monotonic nanoseconds (see scheduler.Clock); a prober converts them with the
// same clock it was given.
type Request struct {
	ID       uint32 // the target's id in the scheduler's table
	Gen      uint32 // probe generation, echoed in the Result so a late answer is recognised
	Sent     int64  // when the scheduler dispatched the probe
	Deadline int64  // when the probe counts as timed out
}

// Result is the answer to a Request. It is small and free of pointers so that it
// travels through lock-free rings without allocation.
type Result struct {
	ID      uint32     // the Request's ID
	Gen     uint32     // the Request's Gen
	Outcome Outcome    // how the probe ended
	Cause   LocalCause // why a LocalError probe could not run, CauseNone otherwise
	Status  uint16     // HTTP status code, 0 when there was none
	// Retransmits is how many times the probe's SYN was sent again before
	// it ended (T5); 0 for probes whose transport retransmits by itself.
	Retransmits uint8
	// Passive marks a failure seen in other traffic to the target, not in
	// a probe: passive evidence, which the scheduler counts as a failed
	// probe. Gen, Retransmits and Latency are zero then, and Done is when
	// the failure was seen.
	Passive bool
	// Latency is the round-trip time (SYN) or the request-to-last-byte time
	// (HTTP). For a probe that was retransmitted, the time from its first
	// send to its end, as a kernel's connect() would take it; such a
	// latency is not a round-trip sample (Karn's rule).
	Latency time.Duration
	Done    int64 // when the probe completed, in scheduler nanoseconds
}

// Sink receives results. Deliver is safe for concurrent use, never blocks for
// long and never drops a result.
type Sink interface {
	Deliver(r Result)
}

// Launcher starts probes for a batch of requests and later delivers at most one
// Result per request to its Sink. The scheduler records a timeout itself when
// no result completed by the deadline, and drops a result that completed after
// it, so a launcher may either stay silent or deliver late.
//
// lane identifies the calling scheduler shard: calls with the same lane never
// overlap, calls with different lanes may run concurrently, so a launcher can
// keep per-lane buffers without locks. Lanes are numbered from 0 up to the
// number of shards the scheduler was built with. Launch must not block on the
// network and must not keep batch after it returns.
type Launcher interface {
	Launch(lane int, batch []Request)
}

// Resender is a [Launcher] that can send a probe in flight again, as a
// kernel retransmits an unanswered SYN (T5): same generation, same source
// port and cookie, so that an answer to either send counts for the probe,
// and no second result. The scheduler calls Resend for a probe that has had
// no answer after its check's retransmission timeout, with the same lane
// rules as Launch; the launcher skips a request whose probe has been
// answered or superseded meanwhile.
type Resender interface {
	Resend(lane int, batch []Request)
}

// Settler is a [Launcher] whose results reach the scheduler with a delay of
// its own (replies read from a ring in batches, probes queued for workers),
// and that can tell when a probe's silence is this host's doing. Before the
// scheduler records a timeout it waits until Settled has reached the
// probe's deadline, so that an answer the kernel received in time is never
// counted as missing however late sonde reads it, and then asks Expired.
// Both are called from scheduler shards, concurrently, and must not block.
type Settler interface {
	// Settled returns the time, in scheduler nanoseconds, up to which the
	// launcher has delivered every result: a probe whose deadline is at or
	// before it and that has no result got no answer in time.
	Settled() int64
	// Expired says whether a probe that reached its deadline without an
	// answer may owe that to this host rather than to the target: a reply
	// lost to a full capture ring in [r.Sent, r.Deadline], a send that left
	// late or failed here. Any cause but CauseNone makes the probe a
	// LocalError with that cause instead of a Timeout.
	Expired(r Request) LocalCause
}

// Target is the destination of a one-shot probe.
type Target struct {
	Addr netip.Addr // address to connect to
	Port uint16     // TCP port
	Host string     // host name the target was given as, if any (HTTP Host and SNI default)
}

// String returns host:port, or addr:port when the target has no host name.
func (t Target) String() string {
	return netip.AddrPortFrom(t.Addr, t.Port).String()
}

// Prober runs one probe and waits for its end. ctx carries the probe's deadline.
// The returned Result has Outcome, Status and Latency set; ID, Gen and Done are
// the caller's to fill in.
type Prober interface {
	Probe(ctx context.Context, t Target) Result
}
