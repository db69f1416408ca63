package sidecar

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
)

// loggingFlags names the flag behind each field of the logging configuration, for errors.
var loggingFlags = map[string]string{
	"format":                      "--logging-format",
	"flushFrequency":              "--log-flush-frequency",
	"verbosity":                   "-v",
	"vmodule":                     "--vmodule",
	"options.text.splitStream":    "--log-text-split-stream",
	"options.text.infoBufferSize": "--log-text-info-buffer-size",
	"options.json.splitStream":    "--log-json-split-stream",
	"options.json.infoBufferSize": "--log-json-info-buffer-size",
}

// ApplyLogging validates the logging flags and switches the process's logging (klog, the
// standard log package) to the chosen format. It can run once per process.
//
// The logging gates (LoggingAlphaOptions, LoggingBetaOptions, ContextualLogging) stay at their
// defaults and are not in --feature-gates, as in external-resizer: json is allowed, the [Alpha]
// split-stream and buffer options are refused.
func (o *Options) ApplyLogging() error {
	gate := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return err
	}
	if errs := logsapi.Validate(o.Logging, gate, nil); len(errs) > 0 {
		return loggingError(errs)
	}
	logs.InitLogs()
	if err := logsapi.ValidateAndApply(o.Logging, gate); err != nil {
		return err
	}
	o.loggingApplied = true
	return nil
}

// loggingError turns component-base's field errors into one line naming the flags.
func loggingError(errs field.ErrorList) error {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		name := e.Field
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i] // vmodule[2]
		}
		msg := fmt.Sprintf("%s: %s", loggingFlags[name], e.ErrorBody())
		if e.Type == field.ErrorTypeForbidden && strings.Contains(e.Detail, string(logsapi.LoggingAlphaOptions)) {
			msg += " (the [Alpha] logging options cannot be enabled: LoggingAlphaOptions is not among the --feature-gates, as in external-resizer)"
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// exitWith reports err, the reason the process stops, as its one line on stderr: a JSON object
// once --logging-format=json is in effect, so that log collectors parse every line; a plain
// line otherwise. It returns code, the exit status.
func (o *Options) exitWith(code int, err error) int {
	if o.loggingApplied && o.Logging.Format != logsapi.DefaultLogFormat {
		klog.ErrorS(err, "csi-resizer stops")
	} else {
		fmt.Fprintf(os.Stderr, "csi-resizer: %v\n", err)
	}
	klog.Flush()
	return code
}
