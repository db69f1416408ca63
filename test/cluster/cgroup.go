package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// What a container costs, read from its cgroup: the kubelet puts every container in a cgroup of
// its own (under the cluster's cgroupRoot), so the cgroup's counters are the container's alone,
// start-up included. This machine has cgroup v1 (hybrid, the kubelet runs with failCgroupV1:
// false); a machine with cgroup v2 only has the v2 files.

// ContainerPID returns the machine's PID of the init process of a container, by the ID the
// kubelet reports in a pod's status (containerd://<id>, or the bare id), from the node's
// containerd (`ctr task ls`). The node has no PID namespace of its own: containerd's PIDs are
// the machine's.
func (c *Cluster) ContainerPID(t testing.TB, containerID string) (int, error) {
	t.Helper()
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := c.InNode(t, c.env["CTR"], "--address", c.env["CONTAINERD_SOCK"], "-n", "k8s.io", "task", "ls")
	if err != nil {
		return 0, fmt.Errorf("ctr task ls: %v\n%s", err, out)
	}
	// Rows are TASK PID STATUS; ctr's cgroup v1 warning comes first.
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == id {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("containerd has no task %s (ctr task ls):\n%s", id, out)
}

// CgroupUsage is what the processes of one cgroup have used since it was made.
type CgroupUsage struct {
	// Version is "v1" or "v2"; Dir the cgroup's directory of the memory controller (v1) or of
	// the unified hierarchy (v2).
	Version string `json:"version"`
	Dir     string `json:"dir"`
	// CPUSeconds is user + system CPU time: v1 cpuacct.usage, v2 cpu.stat usage_usec.
	CPUSeconds float64 `json:"cpuSeconds"`
	// MemoryPeakBytes is the most memory the cgroup was charged at once (v1
	// memory.max_usage_in_bytes, v2 memory.peak): anonymous memory and page cache, the
	// executable's pages included. MemoryBytes is the charge when read (v1
	// memory.usage_in_bytes, v2 memory.current).
	MemoryPeakBytes int64 `json:"memoryPeakBytes"`
	MemoryBytes     int64 `json:"memoryBytes"`
}

// ProcessCgroupUsage reads the usage of the cgroup the process pid is in.
func ProcessCgroupUsage(pid int) (CgroupUsage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return CgroupUsage{}, err
	}
	return ReadCgroupUsage("/sys/fs/cgroup", string(b))
}

// ReadCgroupUsage reads the usage of the cgroup a /proc/<pid>/cgroup file (procCgroup) names,
// with the hierarchies mounted under root. cgroup v1's cpuacct and memory controllers are used
// when the file names them (v1 and hybrid machines), else the unified hierarchy's (0::path).
func ReadCgroupUsage(root, procCgroup string) (CgroupUsage, error) {
	v1 := map[string]string{} // controller -> directory
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = filepath.Join(root, parts[2])
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			// A co-mounted hierarchy (cpu,cpuacct) is mounted under its list's name.
			v1[ctl] = filepath.Join(root, parts[1], parts[2])
		}
	}
	if cpu, mem := v1["cpuacct"], v1["memory"]; cpu != "" && mem != "" {
		u := CgroupUsage{Version: "v1", Dir: mem}
		ns, err := readInt(filepath.Join(cpu, "cpuacct.usage"))
		if err != nil {
			return u, err
		}
		u.CPUSeconds = float64(ns) / 1e9
		if u.MemoryPeakBytes, err = readInt(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
			return u, err
		}
		u.MemoryBytes, err = readInt(filepath.Join(mem, "memory.usage_in_bytes"))
		return u, err
	}
	if unified == "" {
		return CgroupUsage{}, fmt.Errorf("no cpuacct and memory controllers (v1) nor unified hierarchy (v2) in:\n%s", procCgroup)
	}
	return readUnified(unified)
}

func readUnified(dir string) (CgroupUsage, error) {
	u := CgroupUsage{Version: "v2", Dir: dir}
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	found := false
	for _, line := range strings.Split(string(stat), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
			us, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return u, fmt.Errorf("%s: %v", filepath.Join(dir, "cpu.stat"), err)
			}
			u.CPUSeconds, found = float64(us)/1e6, true
		}
	}
	if !found {
		return u, fmt.Errorf("%s has no usage_usec", filepath.Join(dir, "cpu.stat"))
	}
	if u.MemoryPeakBytes, err = readInt(filepath.Join(dir, "memory.peak")); err != nil {
		return u, fmt.Errorf("%v (memory.peak needs Linux 5.19 or later)", err)
	}
	u.MemoryBytes, err = readInt(filepath.Join(dir, "memory.current"))
	return u, err
}

func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", file, err)
	}
	return v, nil
}
