package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// entry is a file or directory of a tar archive.
type entry struct {
	name   string // relative, no leading slash; a directory's ends in "/"
	mode   int64  // permission bits, with the sticky bit where wanted
	data   []byte // a file's contents; nil for a directory
	xattrs map[string][]byte
}

func dir(name string, mode int64) entry { return entry{name: name + "/", mode: mode} }

func file(name string, mode int64, data []byte) entry {
	if data == nil {
		data = []byte{}
	}
	return entry{name: name, mode: mode, data: data}
}

// tarBytes writes entries as a tar archive that depends on nothing but
// them and mtime: sorted by name, owned by root (0:0, no names), every date
// mtime. Extended attributes go in PAX records (SCHILY.xattr.NAME, the
// convention of GNU tar, containerd and Go's archive/tar). Every parent
// directory must be among the entries.
func tarBytes(entries []entry, mtime time.Time) ([]byte, error) {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	names := make(map[string]bool, len(entries))
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		name := strings.TrimSuffix(e.name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("tar entry %q: want a clean relative path", e.name)
		}
		if names[name] {
			return nil, fmt.Errorf("tar entry %q: twice", e.name)
		}
		names[name] = true
		if parent := path.Dir(name); parent != "." && !names[parent] {
			return nil, fmt.Errorf("tar entry %q: its directory %s/ comes first", e.name, parent)
		}
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Format: tar.FormatUSTAR}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if len(e.xattrs) > 0 {
			h.Format, h.PAXRecords = tar.FormatPAX, make(map[string]string, len(e.xattrs))
			for k, v := range e.xattrs {
				h.PAXRecords["SCHILY.xattr."+k] = string(v)
			}
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar entry %s: %w", e.name, err)
		}
		if _, err := w.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar entry %s: %w", e.name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses b at the best compression, with an empty gzip header
// (no name, no date), so the output depends only on b and Go's compressor.
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// The format of the security.capability extended attribute: struct
// vfs_cap_data of <linux/capability.h>, revision 2, little-endian.
const (
	vfsCapRevision2      = 0x02000000
	vfsCapFlagsEffective = 0x000001
	vfsCapSize2          = 4 + 2*8 // magic_etc, then {permitted, inheritable} for caps 0-31 and 32-63
)

// fileCapabilities returns the value of security.capability that grants
// caps as permitted and effective ("+ep", as setcap writes it), with none
// inheritable. Revision 2 is what setcap writes outside a user namespace;
// a runtime that maps users converts it on extraction.
func fileCapabilities(caps ...int) []byte {
	var permitted [2]uint32
	for _, c := range caps {
		permitted[c/32] |= 1 << (c % 32)
	}
	b := make([]byte, vfsCapSize2)
	binary.LittleEndian.PutUint32(b[0:], vfsCapRevision2|vfsCapFlagsEffective)
	binary.LittleEndian.PutUint32(b[4:], permitted[0])  // data[0].permitted
	binary.LittleEndian.PutUint32(b[12:], permitted[1]) // data[1].permitted
	return b
}

// sondeCapabilities are the capabilities of the SYN prober with eBPF reply
// capture (raw sockets, attaching the TC/TCX program, loading it) and of
// passive evidence (CAP_BPF and CAP_PERFMON for the tracing programs).
// `sonde run` drops CAP_PERFMON after start unless a check asks for
// passive evidence.
var sondeCapabilities = []int{unix.CAP_NET_RAW, unix.CAP_NET_ADMIN, unix.CAP_BPF, unix.CAP_PERFMON}
