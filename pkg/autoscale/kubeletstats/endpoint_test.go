package kubeletstats

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestParseAddressTypes(t *testing.T) {
	got, err := ParseAddressTypes("")
	if err != nil || !slices.Equal(got, DefaultAddressTypes) {
		t.Fatalf("empty: got %v, %v; want the defaults %v", got, err, DefaultAddressTypes)
	}
	got, err = ParseAddressTypes(" Hostname, InternalDNS ,InternalIP")
	want := []v1.NodeAddressType{v1.NodeHostName, v1.NodeInternalDNS, v1.NodeInternalIP}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	for value, wantErr := range map[string]string{
		"InternalIP,internalip": `unknown node address type "internalip"`,
		"InternalIP,,Hostname":  `unknown node address type ""`,
		"Hostname,Hostname":     `"Hostname" is listed twice`,
	} {
		if _, err := ParseAddressTypes(value); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: got error %v, want one containing %s", value, err, wantErr)
		}
	}
}

func TestEndpoint(t *testing.T) {
	all := []v1.NodeAddress{
		{Type: v1.NodeHostName, Address: "node-a"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: v1.NodeInternalIP, Address: "10.0.0.7"},
		{Type: v1.NodeInternalIP, Address: "fd00::7"},
	}
	cases := []struct {
		name      string
		node      *v1.Node
		preferred []v1.NodeAddressType
		want      string
		wantErr   []string
	}{
		{name: "default prefers InternalIP, the first one", node: testNode("a", 10250, all...), want: "10.0.0.7:10250"},
		{name: "the preference order counts, not the node's", node: testNode("a", 10250, all...),
			preferred: []v1.NodeAddressType{v1.NodeExternalIP, v1.NodeInternalIP}, want: "203.0.113.7:10250"},
		{name: "falls through to the next type", node: testNode("a", 10250, all[0]), want: "node-a:10250"},
		{name: "IPv6 in brackets", node: testNode("a", 10250, v1.NodeAddress{Type: v1.NodeInternalIP, Address: "fd00::7"}),
			want: "[fd00::7]:10250"},
		{name: "empty address skipped", node: testNode("a", 10250, v1.NodeAddress{Type: v1.NodeInternalIP},
			v1.NodeAddress{Type: v1.NodeHostName, Address: "node-a"}), want: "node-a:10250"},
		{name: "no port", node: testNode("node-x", 0, all...),
			wantErr: []string{"node node-x", "kubeletEndpoint.port is 0"}},
		{name: "no address of the types", node: testNode("node-y", 10250, all[0]),
			preferred: []v1.NodeAddressType{v1.NodeInternalIP},
			wantErr:   []string{"node node-y has no address of the types InternalIP", "Hostname=node-a", "--kubelet-preferred-address-types"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Endpoint(tc.node, tc.preferred)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
