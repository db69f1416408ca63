// Package policy is the volume-autoscaler's decision: from a PVC, its StorageClass, the
// kubelet's file system stats for its volume and the autoscaler's own record on the PVC,
// whether to grow the PVC's request, to what, or why not (docs/autoscaler.md).
//
// Everything here is a pure function of its arguments: no API calls, no clock reads, no memory
// kept between calls. The only state is the record the autoscaler writes on the PVC in the same
// patch as the request (AnnLastResize), so a restarted or newly elected autoscaler decides as
// the one before it would have, and the rules can be table-tested and fuzzed.
package policy
