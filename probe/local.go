package probe

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// LocalCause says why this host could not run a probe: the outcome is then
// [LocalError], which is no verdict on the target.
type LocalCause uint8

// The local causes. Their String values label metrics and logs.
const (
	CauseNone        LocalCause = iota // not a local error
	CauseDescriptors                   // EMFILE, ENFILE: out of file descriptors
	CausePorts                         // EADDRNOTAVAIL, EADDRINUSE: out of local ports, or the source address is not local
	CauseBuffers                       // ENOBUFS, ENOMEM: out of socket buffers or kernel memory
	CausePermissions                   // EPERM, EACCES from socket() or bind(): not allowed to open or bind the socket
	CauseCapture                       // the reply may have been lost by this host's capture (a full ring buffer) before sonde read it
	CauseLate                          // this host could not send the probe, or watch it to its end, in time (a starved prober)

	// NumLocalCauses is the number of causes; arrays indexed by LocalCause use it.
	NumLocalCauses
)

var causeNames = [NumLocalCauses]string{
	CauseNone:        "none",
	CauseDescriptors: "descriptors",
	CausePorts:       "ports",
	CauseBuffers:     "buffers",
	CausePermissions: "permissions",
	CauseCapture:     "capture",
	CauseLate:        "late",
}

// String returns the cause's name as used in metric labels and logs.
func (c LocalCause) String() string {
	if c < NumLocalCauses {
		return causeNames[c]
	}
	return "unknown"
}

// LocalCauseOf tells whether err, from opening, binding or connecting a
// probe's socket, is this host's trouble rather than the target's, and
// which. It inspects errnos and the failing system call, never messages.
// EPERM and EACCES count only from socket() and bind(): from connect() they
// come from a firewall rule or a broadcast address, a verdict on the path to
// the target.
func LocalCauseOf(err error) LocalCause {
	var errno unix.Errno
	if err == nil || !errors.As(err, &errno) {
		return CauseNone
	}
	switch errno {
	case unix.EMFILE, unix.ENFILE:
		return CauseDescriptors
	case unix.EADDRNOTAVAIL, unix.EADDRINUSE:
		return CausePorts
	case unix.ENOBUFS, unix.ENOMEM:
		return CauseBuffers
	case unix.EPERM, unix.EACCES:
		var se *os.SyscallError
		if errors.As(err, &se) && (se.Syscall == "socket" || se.Syscall == "bind") {
			return CausePermissions
		}
	}
	return CauseNone
}
