package csi

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestSocketPath(t *testing.T) {
	for address, want := range map[string]string{
		"/csi/csi.sock":        "/csi/csi.sock",
		"unix:///csi/csi.sock": "/csi/csi.sock",
		"localhost:10000":      "",
		"dns:///driver:10000":  "",
	} {
		if got := socketPath(address); got != want {
			t.Errorf("socketPath(%q) = %q, want %q", address, got, want)
		}
	}
}

// A socket that is not there yet is not a permission problem: the driver may be starting.
func TestCheckSocketAccessMissingSocket(t *testing.T) {
	if err := checkSocketAccess(filepath.Join(t.TempDir(), "csi.sock")); err != nil {
		t.Errorf("checkSocketAccess of a missing socket: %v, want nil", err)
	}
	if err := dialPermissionError(filepath.Join(t.TempDir(), "csi.sock")); err != nil {
		t.Errorf("dialPermissionError of a missing socket: %v, want nil", err)
	}
}

func TestSocketPermissionErrorNamesBothSides(t *testing.T) {
	err := error(&SocketPermissionError{
		Path: "/csi/csi.sock", Owner: 0, Group: 0, Mode: fs.ModeSocket | 0o755, DirMode: fs.ModeDir | 0o755,
		UID: 65532, GID: 65532, Groups: []int{65532}, Err: syscall.EACCES,
	})
	msg := err.Error()
	for _, want := range []string{"/csi/csi.sock", "permission denied", "owned by uid 0 gid 0 with mode Srwxr-xr-x",
		"runs as uid 65532 gid 65532 (supplementary groups [65532])", "runAsUser: 0", "docs/security.md"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if !errors.Is(err, syscall.EACCES) {
		t.Error("the error does not unwrap to EACCES")
	}
}
