// Package kubeletstats reads volume usage straight from each kubelet's Summary API
// (GET https://NODE:PORT/stats/summary), for the volume-autoscaler (issue 33).
//
// Why the kubelet, directly: the kubelet already measures every mounted volume (capacity,
// available and used bytes and inodes, per PVC), so the autoscaler needs no Prometheus and no
// metrics pipeline in between. It talks to the kubelet's own HTTPS port, the one the Node
// publishes in status.daemonEndpoints.kubeletEndpoint, with the ServiceAccount's token; the
// kubelet authorizes that request as the subresource nodes/stats, verb get, which grants
// reading statistics and nothing else.
//
// Why never nodes/proxy: reading the same data through the apiserver's node proxy
// (/api/v1/nodes/NAME/proxy/stats/summary) needs nodes/proxy, and that permission is not
// read-only: with it, a GET reaches every kubelet endpoint, exec and attach into any container
// included. A volume autoscaler must not hold it, so this package has no proxy mode at all.
//
// The pieces: Endpoint picks the address and port of a Node; Client reads and decodes one
// kubelet's summary (TLS verified against a CA bundle unless explicitly insecure, the token
// file re-read as it rotates, a per-request timeout and a response size limit, errors that name
// the node and what to check); Volumes turns a summary into usage per PVC; Poller reads many
// nodes with bounded concurrency and reports, for each node, its volumes or its error and how
// long the read took.
package kubeletstats
