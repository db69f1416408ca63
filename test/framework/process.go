package framework

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGracePeriod is how long Stop waits after SIGTERM before SIGKILL.
const stopGracePeriod = 15 * time.Second

// logTailLines is how much of each process log a failed test prints.
const logTailLines = 60

// Process is a binary run as a separate OS process in its own process group.
// Its stdout and stderr go to LogPath, which survives restarts (each start
// appends a header line). Create with NewProcess (to set Env or Dir before
// Start) or StartProcess.
type Process struct {
	Name    string   // label in logs and failure output
	Binary  string   // path of the executable
	Args    []string // arguments, without the program name
	Env     []string // extra KEY=VALUE pairs on top of the test's environment
	Dir     string   // working directory; empty = the test's
	LogPath string   // combined stdout/stderr
	// HTTPAddr is the host:port the process serves HTTP on, when the
	// starter knows it (StartResizer sets it); empty otherwise.
	HTTPAddr string
	// Credential runs the process as another user (nil: as the test runs). Files it needs must
	// be readable by that user.
	Credential *syscall.Credential

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run exited
	exitErr error         // valid once done is closed
	starts  int
}

// NewProcess returns a Process that logs into a fresh file in a temp dir of
// t. It does not start it.
func NewProcess(t testing.TB, name, binary string, args ...string) *Process {
	t.Helper()
	return &Process{
		Name:    name,
		Binary:  binary,
		Args:    args,
		LogPath: filepath.Join(t.TempDir(), name+".log"),
	}
}

// StartProcess starts binary with args as a separate process and kills it
// (and its process group) when the test ends, printing the log tail if the
// test failed.
func StartProcess(t testing.TB, name, binary string, args ...string) *Process {
	t.Helper()
	p := NewProcess(t, name, binary, args...)
	p.Start(t)
	return p
}

// Start runs the process. The first Start registers the cleanup that kills
// it at the end of the test.
func (p *Process) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		t.Fatalf("%s: Start while already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s: open log: %v", p.Name, err)
	}
	p.starts++
	fmt.Fprintf(logFile, "=== %s start #%d at %s: %s %s\n", p.Name, p.starts,
		time.Now().Format(time.RFC3339Nano), p.Binary, strings.Join(p.Args, " "))

	cmd := exec.Command(p.Binary, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: cleanup kills the group, so children of the
		// process (e.g. a driver started through sh -c) die with it.
		Setpgid: true,
		// If the test binary dies without running cleanups (test timeout,
		// SIGKILL), the kernel kills the child instead of leaking it.
		Pdeathsig:  syscall.SIGKILL,
		Credential: p.Credential,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("%s: start %s: %v", p.Name, p.Binary, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()

	if p.starts == 1 {
		t.Cleanup(func() {
			_ = p.Kill()
			if t.Failed() {
				t.Logf("--- last %d lines of %s log (%s) ---\n%s", logTailLines, p.Name, p.LogPath, p.LogTail(logTailLines))
			}
		})
	}
}

func (p *Process) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pid is the pid of the current run, 0 if never started.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited reports whether the current run has ended, and its exit error
// (nil for exit code 0).
func (p *Process) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !p.exitedLocked() {
		return false, nil
	}
	return true, p.exitErr
}

// Done is closed when the current run exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitCode returns the exit code of the ended run, -1 if it was killed by a
// signal or has not ended.
func (p *Process) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !p.exitedLocked() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// WaitExit waits up to timeout for the current run to end and returns its
// exit error; it fails if the process is still running then.
func (p *Process) WaitExit(timeout time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return fmt.Errorf("%s was never started", p.Name)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		_, err := p.Exited()
		return err
	case <-t.C:
		return fmt.Errorf("%s (pid %d) still running after %v", p.Name, p.Pid(), timeout)
	}
}

// signal sends sig to the process group of the current run.
func (p *Process) signal(sig syscall.Signal) (done <-chan struct{}, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return p.done, nil
	}
	// After the leader exited only SIGKILL still goes out: it sweeps up
	// children left in the group (a pgid is not reused while the group has
	// members, so this cannot hit an unrelated process in practice).
	if p.exitedLocked() && sig != syscall.SIGKILL {
		return p.done, nil
	}
	// Negative pid: the whole group started with Setpgid.
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return p.done, fmt.Errorf("%s: kill -%d: %w", p.Name, sig, err)
	}
	return p.done, nil
}

// Kill sends SIGKILL to the process group and waits for the exit: a crash,
// with no chance to clean up (lease release, socket removal, ...).
func (p *Process) Kill() error {
	done, err := p.signal(syscall.SIGKILL)
	if err != nil {
		return err
	}
	if done != nil {
		<-done
	}
	return nil
}

// Freeze sends SIGSTOP to the process group: the process stays alive (its connections stay
// open, its lease is not released) but does nothing until it is killed, like a hung node. A
// test uses it to make sure work stays undone before a Kill, or that the process acts only
// once something else has happened (Thaw). SIGKILL still ends a frozen process.
func (p *Process) Freeze() error {
	_, err := p.signal(syscall.SIGSTOP)
	return err
}

// Thaw sends SIGCONT to the process group: a frozen process goes on from where it stopped,
// with whatever its connections received meanwhile.
func (p *Process) Thaw() error {
	_, err := p.signal(syscall.SIGCONT)
	return err
}

// Stop sends SIGTERM and waits for the exit; after stopGracePeriod it
// kills the group and returns an error saying the process ignored SIGTERM.
func (p *Process) Stop() error {
	done, err := p.signal(syscall.SIGTERM)
	if err != nil {
		return err
	}
	if done == nil {
		return nil
	}
	t := time.NewTimer(stopGracePeriod)
	defer t.Stop()
	select {
	case <-done:
		// Children of the process may outlive it; the group goes too.
		_, _ = p.signal(syscall.SIGKILL)
		return nil
	case <-t.C:
		_ = p.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.Name, stopGracePeriod)
	}
}

// Restart stops the process (SIGTERM) and starts it again with the same
// binary, arguments and log file.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	if err := p.Stop(); err != nil {
		t.Logf("restart: %v", err)
	}
	p.Start(t)
}

// Log returns the whole log file.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("<cannot read %s: %v>", p.LogPath, err)
	}
	return string(b)
}

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string {
	return tailLines(p.Log(), n)
}

// LogContains reports whether the log contains s.
func (p *Process) LogContains(s string) bool {
	return strings.Contains(p.Log(), s)
}

func tailLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// port is released before the caller binds it, so another process can race
// for it; callers that start servers retry on "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
