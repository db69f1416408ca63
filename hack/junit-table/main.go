// Command junit-table turns the JUnit reports of e2e.test runs (one run per resizer image) into
// the Markdown table of docs/k8s-e2e.md, one row per spec and one column per run, and gives the
// run's verdict (hack/k8s-e2e.sh, make test-k8s-e2e):
//
//	junit-table -match REGEXP [-match ...] [-exclude REGEXP] -notes FILE \
//	  -expect DRYRUN.xml[,DRYRUN2.xml] -exit ours=0 -exit upstream=0 -check \
//	  ours=A.xml,B.xml upstream=C.xml,D.xml
//
// Only specs whose name matches one of the -match expressions and not -exclude are listed
// (e2e.test's report also lists, as skipped, every spec the run's focus left out). A run may
// have several reports, of e2e.test processes that ran side by side. The notes file
// (test/k8s-e2e/notes.tsv) has lines "REGEXP<TAB>reason", why the specs the REGEXP matches do not
// run in this environment with any image, and "differs<TAB>REGEXP<TAB>reason", why their outcome
// differs between the images; the reason is written next to every spec it matches that did not
// pass everywhere.
//
// With -check it exits 1 (after the table) when the runs do not show a clean result. A verdict
// must not be fooled by a run that went wrong before or around its specs, so it fails on each of:
//
//   - an e2e.test exit status that is not 0, or a run without one (-exit NAME=STATUS);
//   - a spec the focus selects that a run did not run (absent, or skipped at run time) and that
//     the notes do not explain: the specs the focus selects are those e2e.test
//     -ginkgo.dry-run, with the same focus and skip, reports as passed (-expect); a spec that ran
//     without being selected means the list is not of this run, also a failure;
//   - a suite-level failure: a [SynchronizedBeforeSuite], [BeforeSuite], [AfterSuite],
//     [SynchronizedAfterSuite], [DeferCleanup (Suite)] or [ReportAfterSuite] node that did not
//     pass, or a report whose SuiteSucceeded property is false;
//   - a spec that fails in any run;
//   - a spec whose outcome (pass, fail, skip, not run) differs between the first run and
//     another, unless a "differs" note explains it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// options are the command line's flags.
type options struct {
	matches   []string          // -match, and -exclude as "!REGEXP"
	notesFile string            // -notes
	check     bool              // -check: the verdict
	expect    []string          // -expect: the dry run's reports
	exits     map[string]string // -exit: e2e.test's exit status of each run
}

func main() {
	var matches, exits, expect multiFlag
	flag.Var(&matches, "match", "regular expression a listed spec's name matches (repeatable)")
	exclude := flag.String("exclude", "", "regular expression of specs not to list (the run's -ginkgo.skip)")
	notesFile := flag.String("notes", "", "file of REGEXP<TAB>reason lines")
	flag.Var(&expect, "expect", "JUnit report(s) of e2e.test -ginkgo.dry-run with the runs' focus and skip, comma-separated (repeatable)")
	flag.Var(&exits, "exit", "NAME=STATUS: e2e.test's exit status in the run NAME (repeatable)")
	check := flag.Bool("check", false, "exit 1 when the runs do not show a clean result (see the command's doc)")
	flag.Parse()
	opts := options{matches: matches, notesFile: *notesFile, check: *check, exits: map[string]string{}}
	if *exclude != "" {
		// A negative look-ahead is not in RE2: an exclusion is a match that removes.
		opts.matches = append(opts.matches, "!"+*exclude)
	}
	for _, e := range expect {
		opts.expect = append(opts.expect, strings.Split(e, ",")...)
	}
	for _, e := range exits {
		name, status, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			fmt.Fprintf(os.Stderr, "junit-table: -exit %q: want NAME=STATUS\n", e)
			os.Exit(2)
		}
		opts.exits[name] = status
	}
	if err := generate(opts, flag.Args(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "junit-table:", err)
		os.Exit(1)
	}
}

// generate writes the table of the runs given as NAME=REPORT[,REPORT...] to out; with
// opts.check, the verdict's summary to log and its failures as the error.
func generate(opts options, args []string, out, log io.Writer) error {
	if len(args) == 0 {
		return errors.New("no run given: NAME=junit.xml ...")
	}
	sel, err := newSelection(opts.matches)
	if err != nil {
		return err
	}
	notes, err := readNotes(opts.notesFile)
	if err != nil {
		return err
	}
	var expected []string
	if len(opts.expect) > 0 {
		if expected, err = readExpected(opts.expect); err != nil {
			return err
		}
	}
	var runs []run
	for _, a := range args {
		name, files, ok := strings.Cut(a, "=")
		if !ok || name == "" || files == "" {
			return fmt.Errorf("%q: want NAME=junit.xml", a)
		}
		r, err := readRun(name, strings.Split(files, ","), sel)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	writeTable(out, runs, expected, notes)
	if !opts.check {
		return nil
	}
	if len(opts.expect) == 0 {
		return errors.New("-check needs -expect: the dry run's report, the specs the focus selects")
	}
	return verdict(runs, expected, opts.exits, notes, log)
}
