package logging

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The same flags, with the same names, on a Go flag set (csi-resizer) and a pflag set
// (statefulset-resizer): the two binaries have one logging command line.
func TestFlagsAreTheSameOnBothFlagSets(t *testing.T) {
	goFlags := flag.NewFlagSet("go", flag.ContinueOnError)
	New("a").AddGoFlags(goFlags)
	pFlags := pflag.NewFlagSet("p", pflag.ContinueOnError)
	New("b").AddFlags(pFlags)
	var goNames, pNames []string
	goFlags.VisitAll(func(f *flag.Flag) { goNames = append(goNames, f.Name) })
	pFlags.VisitAll(func(f *pflag.Flag) { pNames = append(pNames, f.Name) })
	if strings.Join(goNames, ",") != strings.Join(pNames, ",") {
		t.Errorf("Go flags %v, pflags %v: want the same", goNames, pNames)
	}
	for _, want := range []string{"logging-format", "v", "vmodule", "log-flush-frequency", "log-json-split-stream"} {
		if pFlags.Lookup(want) == nil {
			t.Errorf("no --%s", want)
		}
	}
	if f := pFlags.Lookup("v"); f == nil || f.Shorthand != "v" {
		t.Errorf("-v is not a shorthand on the pflag set: %+v", f)
	}
}

// A configuration component-base refuses is one line naming the flags, not component-base's
// configuration fields. (Only refused configurations: a valid one would be applied to this
// test process.)
func TestApplyRefusesNamingTheFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--log-text-split-stream"}, []string{"--log-text-split-stream", "LoggingAlphaOptions"}},
		{[]string{"--logging-format=xml"}, []string{"--logging-format", "xml"}},
		{[]string{"--logging-format=json", "--vmodule=controller=5"}, []string{"--vmodule", "text"}},
		{[]string{"--log-flush-frequency=0s"}, []string{"--log-flush-frequency"}},
		{[]string{"--log-json-split-stream", "--logging-format=xml"}, []string{"--log-json-split-stream", "--logging-format", "; "}},
	} {
		l := New("statefulset-resizer")
		fs := pflag.NewFlagSet("p", pflag.ContinueOnError)
		l.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := l.Apply()
		if err == nil {
			t.Fatalf("%v: Apply() = nil, want an error", tc.args)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not name %q", tc.args, err, w)
			}
		}
		if strings.ContainsAny(err.Error(), "\r\n") || strings.Contains(err.Error(), "options.") {
			t.Errorf("%v: error %q, want one line naming flags, not configuration fields", tc.args, err)
		}
		if l.Structured() {
			t.Errorf("%v: Structured() after a refused configuration", tc.args)
		}
	}
}

// Before the logging is applied (a flag that cannot be parsed, refused logging flags), the
// reason the process stops is one plain line starting with the command's name.
func TestFailBeforeApplyIsOnePlainLine(t *testing.T) {
	l := New("statefulset-resizer")
	l.Config.Format = "json" // asked for, not applied
	var stderr bytes.Buffer
	if code := l.Fail(&stderr, 3, errors.New("no access")); code != 3 {
		t.Errorf("Fail returned %d, want the code it was given, 3", code)
	}
	if got := stderr.String(); got != "statefulset-resizer: no access\n" {
		t.Errorf("stderr %q, want one plain line", got)
	}
}
