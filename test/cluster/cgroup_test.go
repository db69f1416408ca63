package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles makes files (path relative to root -> content) under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadCgroupUsageV1Hybrid(t *testing.T) {
	root := t.TempDir()
	pod := "/cr/kubepods/besteffort/podX/abc"
	writeFiles(t, root, map[string]string{
		"cpuacct" + pod + "/cpuacct.usage":             "2500000000\n",
		"memory" + pod + "/memory.max_usage_in_bytes":  "41943040\n",
		"memory" + pod + "/memory.usage_in_bytes":      "20971520\n",
		"unified" + pod + "/cpu.stat":                  "usage_usec 1\n",
		"cpu" + pod + "/cpu.shares":                    "2\n",
		"memory/cr/kubepods/memory.max_usage_in_bytes": "1\n",
	})
	proc := "9:pids:" + pod + "\n4:memory:" + pod + "\n3:cpuacct:" + pod + "\n2:cpu:" + pod + "\n0::" + pod + "\n"
	u, err := ReadCgroupUsage(root, proc)
	if err != nil {
		t.Fatal(err)
	}
	if u.Version != "v1" || u.CPUSeconds != 2.5 || u.MemoryPeakBytes != 40<<20 || u.MemoryBytes != 20<<20 {
		t.Errorf("got %+v, want v1, 2.5 s, peak 40 MiB, 20 MiB now", u)
	}
}

func TestReadCgroupUsageV1CoMounted(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cpu,cpuacct/p/cpuacct.usage":        "1000000\n",
		"memory/p/memory.max_usage_in_bytes": "10\n",
		"memory/p/memory.usage_in_bytes":     "5\n",
	})
	u, err := ReadCgroupUsage(root, "3:cpu,cpuacct:/p\n5:memory:/p\n")
	if err != nil {
		t.Fatal(err)
	}
	if u.CPUSeconds != 0.001 || u.MemoryPeakBytes != 10 {
		t.Errorf("got %+v, want 0.001 s and peak 10", u)
	}
}

func TestReadCgroupUsageV2(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"k/c/cpu.stat":       "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
		"k/c/memory.peak":    "300\n",
		"k/c/memory.current": "200\n",
	})
	u, err := ReadCgroupUsage(root, "0::/k/c\n")
	if err != nil {
		t.Fatal(err)
	}
	if u.Version != "v2" || u.CPUSeconds != 1.5 || u.MemoryPeakBytes != 300 || u.MemoryBytes != 200 {
		t.Errorf("got %+v, want v2, 1.5 s, peak 300, 200 now", u)
	}
}

func TestReadCgroupUsageErrors(t *testing.T) {
	root := t.TempDir()
	if _, err := ReadCgroupUsage(root, "1:name=systemd:/x\n"); err == nil || !strings.Contains(err.Error(), "no cpuacct") {
		t.Errorf("no usable hierarchy: got %v, want an error naming what is missing", err)
	}
	writeFiles(t, root, map[string]string{"k/cpu.stat": "usage_usec 1\n", "k/memory.current": "1\n"})
	if _, err := ReadCgroupUsage(root, "0::/k\n"); err == nil || !strings.Contains(err.Error(), "memory.peak") {
		t.Errorf("v2 without memory.peak: got %v, want an error naming memory.peak", err)
	}
}
