// Package logging is the one way both binaries set up their logs: component-base's logging
// flags (--logging-format=text|json, -v, --vmodule, --log-flush-frequency and the [Alpha]
// --log-{text,json}-* options), applied as the CSI sidecars apply them, and the rule for the
// line a process prints when it stops on an error (a JSON object once --logging-format=json is
// in effect, so that a log pipeline can parse every line on stderr).
package logging

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
)

// flagNames names the flag behind each field of the logging configuration, for errors.
var flagNames = map[string]string{
	"format":                      "--logging-format",
	"flushFrequency":              "--log-flush-frequency",
	"verbosity":                   "-v",
	"vmodule":                     "--vmodule",
	"options.text.splitStream":    "--log-text-split-stream",
	"options.text.infoBufferSize": "--log-text-info-buffer-size",
	"options.json.splitStream":    "--log-json-split-stream",
	"options.json.infoBufferSize": "--log-json-info-buffer-size",
}

// Logging is a command's logging configuration, filled by its flags.
type Logging struct {
	// Config is component-base's configuration, which the flags fill.
	Config *logsapi.LoggingConfiguration

	command string
	// applied: Apply has configured the process's logging, so klog writes in Config.Format.
	applied bool
}

// New returns the configuration of command (the name its plain error lines start with) at
// component-base's defaults.
func New(command string) *Logging {
	return &Logging{Config: logsapi.NewLoggingConfiguration(), command: command}
}

// AddGoFlags registers the logging flags on a Go flag set (csi-resizer, whose command line is
// upstream external-resizer's).
func (l *Logging) AddGoFlags(fs *flag.FlagSet) { logsapi.AddGoFlags(l.Config, fs) }

// AddFlags registers the logging flags on a pflag set (statefulset-resizer).
func (l *Logging) AddFlags(fs *pflag.FlagSet) { logsapi.AddFlags(l.Config, fs) }

// Apply validates the logging flags and switches the process's logging (klog, the standard
// log package) to the chosen format. It can run once per process: component-base refuses to
// change the logging of a process once set.
//
// The logging gates (LoggingAlphaOptions, LoggingBetaOptions, ContextualLogging) stay at their
// defaults and are not in --feature-gates, as in external-resizer: json is allowed, the [Alpha]
// split-stream and buffer options are refused.
func (l *Logging) Apply() error {
	gate := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return err
	}
	if errs := logsapi.Validate(l.Config, gate, nil); len(errs) > 0 {
		return flagError(errs)
	}
	logs.InitLogs()
	if err := logsapi.ValidateAndApply(l.Config, gate); err != nil {
		return err
	}
	l.applied = true
	return nil
}

// Structured says whether what the process prints on stderr must be structured log entries:
// Apply has switched logging to a format other than text (json), which log collectors parse
// line by line.
func (l *Logging) Structured() bool {
	return l.applied && l.Config.Format != logsapi.DefaultLogFormat
}

// Fail reports err, the reason the process stops, as its one line on stderr (given as
// stderr): a JSON object "<command> stops" with the error once the format is json, a plain
// "<command>: <err>" line otherwise. It flushes the logs and returns code, the exit status.
func (l *Logging) Fail(stderr io.Writer, code int, err error) int {
	if l.Structured() {
		klog.ErrorS(err, l.command+" stops")
	} else {
		fmt.Fprintf(stderr, "%s: %v\n", l.command, err)
	}
	klog.Flush()
	return code
}

// flagError turns component-base's field errors into one line naming the flags.
func flagError(errs field.ErrorList) error {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		name := e.Field
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i] // vmodule[2]
		}
		msg := fmt.Sprintf("%s: %s", flagNames[name], e.ErrorBody())
		if e.Type == field.ErrorTypeForbidden && strings.Contains(e.Detail, string(logsapi.LoggingAlphaOptions)) {
			msg += " (the [Alpha] logging options cannot be enabled: LoggingAlphaOptions is not among the --feature-gates, as in external-resizer)"
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}
