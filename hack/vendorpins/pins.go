//go:build tools

// Package vendorpins is a temporary list of packages the work in progress imports, so that one
// `go mod vendor` brings them all in before the code that uses them lands. Removed when done.
package vendorpins

import (
	_ "k8s.io/apiserver/pkg/util/feature"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/csi-translation-lib"
	_ "k8s.io/csi-translation-lib/plugins"
)
