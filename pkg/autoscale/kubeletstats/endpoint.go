package kubeletstats

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// DefaultAddressTypes is the order in which a Node's addresses are tried when none is given.
// InternalIP first: it is what a pod in the cluster can reach without DNS; Hostname next, for
// clusters whose kubelet certificates name only the host; ExternalIP last, since it may leave
// the cluster network.
var DefaultAddressTypes = []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeHostName, v1.NodeExternalIP}

// knownAddressTypes are the NodeAddress types the API defines.
var knownAddressTypes = []v1.NodeAddressType{
	v1.NodeHostName, v1.NodeInternalIP, v1.NodeExternalIP, v1.NodeInternalDNS, v1.NodeExternalDNS,
}

// ParseAddressTypes parses a flag value like "InternalIP,Hostname" into a preference list.
// An empty value gives DefaultAddressTypes. Unknown or repeated types are errors, so a typo
// in the flag stops the program instead of silently skipping every node.
func ParseAddressTypes(value string) ([]v1.NodeAddressType, error) {
	if strings.TrimSpace(value) == "" {
		return append([]v1.NodeAddressType(nil), DefaultAddressTypes...), nil
	}
	var types []v1.NodeAddressType
	seen := map[v1.NodeAddressType]bool{}
	for _, part := range strings.Split(value, ",") {
		t := v1.NodeAddressType(strings.TrimSpace(part))
		if !slices.Contains(knownAddressTypes, t) {
			return nil, fmt.Errorf("unknown node address type %q: use a comma-separated list of %s", t, joinTypes(knownAddressTypes))
		}
		if seen[t] {
			return nil, fmt.Errorf("node address type %q is listed twice", t)
		}
		seen[t] = true
		types = append(types, t)
	}
	return types, nil
}

func joinTypes(types []v1.NodeAddressType) string {
	s := make([]string, len(types))
	for i, t := range types {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// Endpoint returns "host:port" of the kubelet on node: the first address of the first type in
// preferred that the Node has, and the port the kubelet published in
// status.daemonEndpoints.kubeletEndpoint. Nothing is guessed: a Node without a usable address
// or port is an error naming the node and what it lacks.
func Endpoint(node *v1.Node, preferred []v1.NodeAddressType) (string, error) {
	if len(preferred) == 0 {
		preferred = DefaultAddressTypes
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port <= 0 || port > 65535 {
		return "", fmt.Errorf("node %s: status.daemonEndpoints.kubeletEndpoint.port is %d: the kubelet has not reported its port (is it running and registered?)", node.Name, port)
	}
	for _, t := range preferred {
		for _, a := range node.Status.Addresses {
			if a.Type == t && a.Address != "" {
				return net.JoinHostPort(a.Address, strconv.Itoa(int(port))), nil
			}
		}
	}
	return "", fmt.Errorf("node %s has no address of the types %s (it has %s): change --kubelet-preferred-address-types to include one it has",
		node.Name, joinTypes(preferred), describeAddresses(node.Status.Addresses))
}

func describeAddresses(addrs []v1.NodeAddress) string {
	if len(addrs) == 0 {
		return "none"
	}
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = string(a.Type) + "=" + a.Address
	}
	return strings.Join(s, ", ")
}
