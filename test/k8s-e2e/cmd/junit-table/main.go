// Command junit-table turns the JUnit reports of e2e.test runs (one per resizer image) into the
// Markdown table of docs/k8s-e2e.md: one row per test, one column per run, and a note for each
// test that did not pass in every run.
//
//	junit-table -match REGEXP [-match ...] [-exclude REGEXP] -notes FILE ours=A.xml,B.xml upstream=C.xml,D.xml
//
// Only tests whose name matches one of the -match expressions and not -exclude are listed
// (e2e.test's report also lists, as skipped, every spec the run's focus left out). A run may
// have several reports, of e2e.test processes that ran side by side. The notes file has one
// "REGEXP<TAB>reason" a line: the reason a test fails or is skipped in this environment,
// written next to every test it matches that did not pass everywhere. A test failing in the
// first run only is marked as such: that is a bug of the first image.
//
// With -check, it exits 1 (after the table) when a test fails in the first run and either
// passes in another run or has no reason in the notes file: a failure the environment does not
// explain.
package main

import (
	"bufio"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

type testCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

type report struct {
	Suites []struct {
		Cases []testCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type run struct {
	name  string
	cases map[string]testCase
}

type note struct {
	re     *regexp.Regexp
	reason string
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var matches multiFlag
	flag.Var(&matches, "match", "regular expression a listed test's name matches (repeatable)")
	exclude := flag.String("exclude", "", "regular expression of tests not to list (the run's -ginkgo.skip)")
	notesFile := flag.String("notes", "", "file of REGEXP<TAB>reason lines")
	check := flag.Bool("check", false, "exit 1 when the first run fails a test the notes do not explain or another run passes")
	flag.Parse()
	if *exclude != "" {
		// A negative look-ahead is not in RE2: an exclusion is a match that removes.
		matches = append(matches, "!"+*exclude)
	}
	if err := generate(matches, *notesFile, *check, flag.Args(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "junit-table:", err)
		os.Exit(1)
	}
}

func generate(matches []string, notesFile string, check bool, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("no run given: NAME=junit.xml ...")
	}
	var res, excl []*regexp.Regexp
	for _, m := range matches {
		list := &res
		if rest, ok := strings.CutPrefix(m, "!"); ok {
			m, list = rest, &excl
		}
		re, err := regexp.Compile(m)
		if err != nil {
			return fmt.Errorf("-match %q: %w", m, err)
		}
		*list = append(*list, re)
	}
	notes, err := readNotes(notesFile)
	if err != nil {
		return err
	}
	var runs []run
	for _, a := range args {
		name, file, ok := strings.Cut(a, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("%q: want NAME=junit.xml", a)
		}
		r, err := readRun(name, file, res, excl)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	writeTable(out, runs, notes)
	if check {
		return unexplained(runs, notes)
	}
	return nil
}

// unexplained names the tests the first run fails (not skipped) that another run passes or
// that no note explains.
func unexplained(runs []run, notes []note) error {
	var bad []string
	for name, c := range runs[0].cases {
		if _, passed := cell(c, true); passed || c.Status == "skipped" || c.Skipped != nil {
			continue
		}
		passedElsewhere := false
		for _, r := range runs[1:] {
			if oc, ok := r.cases[name]; ok {
				_, p := cell(oc, true)
				passedElsewhere = passedElsewhere || p
			}
		}
		if passedElsewhere || noteReason(name, notes) == "" {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%d test(s) fail with %s, unexplained by the environment:\n  %s",
		len(bad), runs[0].name, strings.Join(bad, "\n  "))
}

func noteReason(name string, notes []note) string {
	for _, nt := range notes {
		if nt.re.MatchString(name) {
			return nt.reason
		}
	}
	return ""
}

func readNotes(file string) ([]note, error) {
	if file == "" {
		return nil, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var notes []note
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		t := s.Text()
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
			continue
		}
		expr, reason, ok := strings.Cut(t, "\t")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want REGEXP<TAB>reason", file, line)
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		notes = append(notes, note{re, strings.TrimSpace(reason)})
	}
	return notes, s.Err()
}

// readRun reads one run's reports (files separated by commas: e2e.test processes that ran side
// by side). A test a second report also lists, skipped by its focus, does not hide a result.
func readRun(name, files string, matches, excl []*regexp.Regexp) (run, error) {
	r := run{name: name, cases: map[string]testCase{}}
	for _, file := range strings.Split(files, ",") {
		data, err := os.ReadFile(file)
		if err != nil {
			return run{}, fmt.Errorf("run %s: %w", name, err)
		}
		var rep report
		if err := xml.Unmarshal(data, &rep); err != nil {
			return run{}, fmt.Errorf("run %s: %s: %w", name, file, err)
		}
		for _, s := range rep.Suites {
			for _, c := range s.Cases {
				c.Name = strings.TrimPrefix(c.Name, "[It] ")
				if !listed(c.Name, matches) || excluded(c.Name, excl) {
					continue
				}
				if old, ok := r.cases[c.Name]; ok && old.Status != "skipped" {
					continue
				}
				r.cases[c.Name] = c
			}
		}
	}
	return r, nil
}

func excluded(name string, excl []*regexp.Regexp) bool {
	for _, re := range excl {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

func listed(name string, matches []*regexp.Regexp) bool {
	for _, re := range matches {
		if re.MatchString(name) {
			return true
		}
	}
	return len(matches) == 0
}

// cell is what a run's column shows for one test; passed says whether it passed.
func cell(c testCase, ok bool) (text string, passed bool) {
	switch {
	case !ok:
		return "not run", false
	case c.Status == "passed":
		return "pass (" + strconv.Itoa(int(c.Time+0.5)) + " s)", true
	case c.Status == "skipped" || c.Skipped != nil:
		return "skip", false
	default:
		return "**FAIL**", false
	}
}

func writeTable(out io.Writer, runs []run, notes []note) {
	names := map[string]bool{}
	for _, r := range runs {
		for n := range r.cases {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	header := "| test |"
	rule := "|---|"
	for _, r := range runs {
		header += " " + r.name + " |"
		rule += "---|"
	}
	fmt.Fprintln(out, header+" note |")
	fmt.Fprintln(out, rule+"---|")
	for _, n := range sorted {
		row := "| " + escape(n) + " |"
		passes := make([]bool, len(runs))
		for i, r := range runs {
			c, ok := r.cases[n]
			text, passed := cell(c, ok)
			passes[i] = passed
			row += " " + text + " |"
		}
		fmt.Fprintln(out, row+" "+escape(noteFor(n, runs, passes, notes))+" |")
	}
}

// noteFor explains a row that did not pass everywhere: a failure of the first run alone is
// flagged; otherwise the notes file's reason, or the skip message of the first run.
func noteFor(name string, runs []run, passes []bool, notes []note) string {
	all := true
	for _, p := range passes {
		all = all && p
	}
	if all {
		return ""
	}
	var parts []string
	if len(runs) > 1 && !passes[0] && allTrue(passes[1:]) {
		parts = append(parts, "fails with "+runs[0].name+" only")
	}
	if reason := noteReason(name, notes); reason != "" {
		parts = append(parts, reason)
	}
	if c, ok := runs[0].cases[name]; ok && c.Skipped != nil && len(parts) == 0 {
		parts = append(parts, strings.TrimPrefix(c.Skipped.Message, "skipped - "))
	}
	return strings.Join(parts, "; ")
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}

func escape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
