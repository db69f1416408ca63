//go:build integration

package bench

import (
	"fmt"
	"strings"
)

// BenchmarkRealNode's part of the report (realnode_test.go): the markdown section "On the real
// node" and its rows in the summary table.

// realNodeMarkdown is the report's section "On the real node".
func realNodeMarkdown(runs []RealNodeRun, meta Meta) string {
	var b strings.Builder
	b.WriteString("\n### On the real node\n\n")
	b.WriteString("`make bench-node` (test/bench/realnode_test.go): the one-node cluster of hack/cluster (real kubelet v1.36.3, containerd 2, docs/cluster.md), csi-driver-host-path deployed by its own kubernetes-1.34 manifests, and its pod's csi-resizer container set to each image in turn (`kubectl set image`, a fresh pod each). Per image, in a namespace of its own: N PVCs of 1Gi, bound and mounted by running pods (10 per pod), one unmounted PVC resized first as a warm-up, then all N patched to 2Gi at once (16 requests in flight). ")
	b.WriteString("Latencies are per PVC, from its patch to the moment the benchmark's watches saw it: the controller step done (the PVC's `allocatedResourceStatuses` NodeResizePending, written by the resizer), the resizer's FileSystemResizeRequired event, and the kubelet's FileSystemResizeSuccessful event (the node step done; the kubelet's syncFrequency is 10 s here); \"last\" is from the first patch to the last one. ")
	b.WriteString("Writes are from the apiserver's audit log (write verbs, Metadata level): the resizer's are those of the pod's ServiceAccount with user agent csi-resizer, the kubelet's those of system:node:<node>. They, the CSI calls and the CPU time are counted from the first patch until every PVC is at 2Gi with no resize in progress and then the resizer has written nothing for 10 s (its events may trail its status writes). CSI calls are from the driver's log (`GRPC call:` lines; the driver serves every sidecar and the kubelet). CPU and memory are the resizer container's cgroup (cgroup v1 on this machine: `cpuacct.usage`, `memory.max_usage_in_bytes`, which counts page cache too); the peak is over the container's life, start-up and the warm-up included.\n\n")
	byBin := map[string]RealNodeRun{}
	for _, r := range runs {
		byBin[r.Binary] = r
	}
	up, ours := byBin[upstreamLabel], byBin[primary]
	fmt.Fprintf(&b, "Measured %s at %s; load average (1, 5, 15 min) %s → %s (upstream's run), %s → %s (csi-resizer's run), on 2 cores shared with other agents' builds and tests: times are under that load, counts are not.\n\n",
		meta.Date, meta.Commit, up.LoadAvg0, up.LoadAvg1, ours.LoadAvg0, ours.LoadAvg1)
	fmt.Fprintf(&b, "| metric | upstream v2.2.1 (`%s`) | csi-resizer (product image `%s`) |\n|---|---|---|\n", up.Image, ours.Image)
	row := func(metric string, f func(RealNodeRun) string) {
		cell := func(r RealNodeRun) string {
			if r.Binary == "" {
				return "not measured"
			}
			return f(r)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", metric, cell(up), cell(ours))
	}
	perN := func(v int, r RealNodeRun) string { return fmt.Sprintf("%.2f", float64(v)/float64(r.PVCs)) }
	lat := func(l Latency) string { return fmt.Sprintf("%.1f s / %.1f s / %.1f s", l.P50, l.P95, l.Last) }
	row("PVCs resized (pods mounting them)", func(r RealNodeRun) string { return fmt.Sprintf("%d (%d)", r.PVCs, r.Pods) })
	row("patch → controller step done (NodeResizePending): p50 / p95 / last", func(r RealNodeRun) string { return lat(r.Controller) })
	row("patch → the resizer's FileSystemResizeRequired event: p50 / p95 / last", func(r RealNodeRun) string { return lat(r.Required) })
	row("patch → FileSystemResizeSuccessful (node done): p50 / p95 / last", func(r RealNodeRun) string { return lat(r.Successful) })
	row("resizer API writes per resize (all)", func(r RealNodeRun) string { return perN(r.Resizer.Total, r) })
	row("… of which events", func(r RealNodeRun) string { return perN(r.Resizer.Events, r) })
	row("… failed (e.g. 409)", func(r RealNodeRun) string { return fmt.Sprint(r.Resizer.Failed) })
	row("kubelet API writes per resize (PVC and events only)", func(r RealNodeRun) string { return perN(kubeletVolumeWrites(r.Kubelet), r) })
	row("ControllerExpandVolume calls per resize", func(r RealNodeRun) string { return perN(r.CSICalls["ControllerExpandVolume"], r) })
	row("NodeExpandVolume calls per resize", func(r RealNodeRun) string { return perN(r.CSICalls["NodeExpandVolume"], r) })
	row("resizer CPU in the window", func(r RealNodeRun) string {
		return fmt.Sprintf("%.2f s (%.1f ms per resize)", r.CgroupEnd.CPUSeconds-r.CgroupStart.CPUSeconds, 1000*(r.CgroupEnd.CPUSeconds-r.CgroupStart.CPUSeconds)/float64(r.PVCs))
	})
	row("resizer CPU since the container started", func(r RealNodeRun) string { return fmt.Sprintf("%.2f s", r.CgroupEnd.CPUSeconds) })
	row("resizer peak memory (cgroup) / at the end", func(r RealNodeRun) string {
		return fmt.Sprintf("%.1f MiB / %.1f MiB", mib(r.CgroupEnd.MemoryPeakBytes), mib(r.CgroupEnd.MemoryBytes))
	})
	row("first patch → all at 2Gi / the resizer's last write", func(r RealNodeRun) string { return fmt.Sprintf("%.1f s / %.1f s", r.WindowSec, r.LastWriteSec) })
	b.WriteString("\n")
	for _, r := range []RealNodeRun{up, ours} {
		if r.Binary == "" {
			continue
		}
		fmt.Fprintf(&b, "- %s (image ID `%s`, cgroup %s): resizer writes %s; kubelet writes %s; the pod's other sidecars' writes %s; CSI calls %s.\n",
			r.Binary, r.ImageID, r.CgroupEnd.Version, kv(r.Resizer.ByTarget), kv(r.Kubelet.ByTarget), kv(r.Sidecars.ByTarget), kv(r.CSICalls))
	}
	return b.String()
}

// kubeletVolumeWrites: the kubelet's writes to PVCs and events (its node step), not its
// leases, node and pod status.
func kubeletVolumeWrites(w auditWrites) int {
	n := 0
	for what, c := range w.ByTarget {
		if f := strings.Fields(what); len(f) >= 2 && (strings.HasPrefix(f[1], "persistentvolumeclaims") || strings.HasPrefix(f[1], "events")) {
			n += c
		}
	}
	return n
}

// realNodeRows are the real node's rows of the summary table.
func (s *summaryRows) realNodeRows(runs []RealNodeRun) {
	_, pairs := byBinary(runs, func(r RealNodeRun) string { return r.Binary }, func(RealNodeRun) string { return "" })
	p := pairs[""]
	if p == nil || p.ours == nil {
		return
	}
	n := p.ours.PVCs
	p50 := func(r RealNodeRun) float64 { return r.Successful.P50 }
	writes := func(r RealNodeRun) float64 { return float64(r.Resizer.Total) / float64(r.PVCs) }
	cpu := func(r RealNodeRun) float64 { return r.CgroupEnd.CPUSeconds - r.CgroupStart.CPUSeconds }
	peak := func(r RealNodeRun) float64 { return mib(r.CgroupEnd.MemoryPeakBytes) }
	s.add(fmt.Sprintf("Real node, %d mounted PVCs: patch → FileSystemResizeSuccessful, p50", n), field(p.up, p50), field(p.ours, p50), fmtF("%.1f s"), "— (report)", "—")
	s.add("… resizer API writes per resize (audit log)", field(p.up, writes), field(p.ours, writes), fmtF("%.2f"), "— (report)", "—")
	s.add("… resizer container CPU in the window (cgroup)", field(p.up, cpu), field(p.ours, cpu), fmtF("%.2f s"), "— (report)", "—")
	s.add("… resizer container peak memory (cgroup)", field(p.up, peak), field(p.ours, peak), fmtF("%.1f MiB"), "— (report)", "—")
}
