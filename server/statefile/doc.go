// Package statefile keeps the daemon's target states across restarts: the
// file's codec, a save of the running targets' states ([Snapshot], [Write])
// streamed as it is written, the restore that matches a file's records with
// the targets of a configuration ([Restore]), the saved states that wait
// for targets discovery has not found yet ([Pending]), the lock that keeps
// two daemons off one file ([Claim]), and the health of the saves
// ([Health]). It holds no goroutine: the daemon decides when to save.
package statefile
