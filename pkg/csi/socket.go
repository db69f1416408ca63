package csi

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SocketPermissionError says that this process may not connect to the driver's socket: a unix
// socket is connected to only with write permission on it (and search permission on its
// directories). It names the socket's owner and mode and the process's identity, because the
// fix is always one of two: run as the socket's owner, or have the driver make the socket
// writable to a group the process is in (docs/security.md).
type SocketPermissionError struct {
	Path string
	// Owner, Group and Mode of the socket as this process sees them (its mount namespace).
	Owner, Group uint32
	Mode         fs.FileMode
	// DirMode is the mode of the socket's directory.
	DirMode fs.FileMode
	// UID, GID and Groups are the process's effective identity.
	UID, GID int
	Groups   []int
	// Err is what the kernel said.
	Err error
}

func (e *SocketPermissionError) Error() string {
	return fmt.Sprintf("cannot connect to the CSI driver's socket %s: %v: the socket is owned by uid %d gid %d with mode %s "+
		"(its directory %s), and csi-resizer runs as uid %d gid %d (supplementary groups %v); connecting needs write "+
		"permission on the socket. Run csi-resizer as the socket's owner (securityContext.runAsUser: %d; the image's "+
		"default user is root, as upstream's), or have the driver create its socket writable by a group csi-resizer "+
		"runs in (securityContext.runAsGroup or supplementalGroups); see docs/security.md",
		e.Path, e.Err, e.Owner, e.Group, e.Mode, e.DirMode, e.UID, e.GID, e.Groups, e.Owner)
}

func (e *SocketPermissionError) Unwrap() error { return e.Err }

// socketPath is the file of a unix socket address as csi-lib-utils accepts it ("/path" or
// "unix:///path"), or "" for other addresses.
func socketPath(address string) string {
	if p, ok := strings.CutPrefix(address, "unix://"); ok {
		return p
	}
	if strings.HasPrefix(address, "/") {
		return address
	}
	return ""
}

// checkSocketAccess returns a *SocketPermissionError when the socket at address exists and
// this process may not write it, without opening a connection to the driver. A socket not
// there yet is no error: the driver may still be starting.
func checkSocketAccess(address string) error {
	path := socketPath(address)
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil && !errors.Is(err, fs.ErrPermission) {
		return nil
	}
	// Faccessat with AT_EACCESS checks the effective identity, which is what connect() uses.
	err := unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS)
	if !errors.Is(err, unix.EACCES) {
		return nil
	}
	return socketPermissionError(path, err)
}

// dialPermissionError dials the socket once and returns a *SocketPermissionError when the
// kernel refuses the connection although the modes allow it (an LSM such as SELinux), so that
// a timed-out Connect says why.
func dialPermissionError(address string) error {
	path := socketPath(address)
	if path == "" {
		return nil
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return nil
	}
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return socketPermissionError(path, err)
	}
	return nil
}

func socketPermissionError(path string, cause error) *SocketPermissionError {
	e := &SocketPermissionError{Path: path, UID: os.Geteuid(), GID: os.Getegid(), Err: cause}
	e.Groups, _ = os.Getgroups()
	if fi, err := os.Stat(path); err == nil {
		e.Mode = fi.Mode()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.Owner, e.Group = st.Uid, st.Gid
		}
	}
	if fi, err := os.Stat(filepath.Dir(path)); err == nil {
		e.DirMode = fi.Mode()
	}
	return e
}
