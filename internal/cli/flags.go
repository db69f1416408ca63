// Package cli holds the command-line pieces statefulset-resizer and volume-autoscaler share
// (pflag commands; csi-resizer keeps upstream external-resizer's Go flags): parsing with errors
// that name the usual mistakes, the leader election flags and the elector they configure, the
// key:value label flag, and the HTTP endpoint for metrics and health checks.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// klogFlags are klog's own flags, which statefulset-resizer accepted before it moved to
// component-base logging (as csi-resizer did before it), and volume-autoscaler never did: under component-base they would do
// nothing, so they are refused with a line that says what replaces them.
var klogFlags = map[string]bool{
	"add_dir_header": true, "alsologtostderr": true, "log_backtrace_at": true, "log_dir": true,
	"log_file": true, "log_file_max_size": true, "logtostderr": true, "one_output": true,
	"skip_headers": true, "skip_log_headers": true, "stderrthreshold": true,
}

// ParseFlags parses args into fs (pflag: flags may come before or after the arguments). On
// an error it names the usual causes since the commands moved from Go's flag package
// to pflag: a long flag given with one dash (-kubeconfig, which Go's flag accepted and pflag
// reads as the short flags k, u, b, ...), or one of klog's own flags; and, when elsewhere
// (may be nil) has something to say about a flag fs lacks, that it belongs to another mode
// of the binary (the controller's flags given to the webhook, or the other way round).
func ParseFlags(fs *pflag.FlagSet, args []string, elsewhere func(name string) string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return err
	}
	for _, arg := range args {
		if arg == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		switch {
		case klogFlags[name]:
			return fmt.Errorf("%s: klog's own flags are not accepted: logs go to stderr, in the format of --logging-format=text|json, with -v and --vmodule (see --help)", arg)
		case len(name) > 1 && strings.HasPrefix(arg, "-") && !strings.HasPrefix(arg, "--") && fs.Lookup(name) != nil:
			return fmt.Errorf("%s: long flags take two dashes: use -%s (see --help)", arg, arg)
		case elsewhere != nil && strings.HasPrefix(arg, "-") && fs.Lookup(name) == nil:
			if msg := elsewhere(name); msg != "" {
				return fmt.Errorf("--%s: %s", name, msg)
			}
		}
	}
	return fmt.Errorf("%w (see --help)", err)
}
