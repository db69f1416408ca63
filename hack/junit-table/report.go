package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// testCase is one <testcase> of ginkgo's JUnit report: a spec ("[It] " and its full text) or a
// suite-level node ("[SynchronizedBeforeSuite]", "[ReportAfterSuite] ...").
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
		Properties []property `xml:"properties>property"`
		Cases      []testCase `xml:"testcase"`
	} `xml:"testsuite"`
}

// run is what one image's e2e.test processes reported.
type run struct {
	name string
	// cases are the listed specs (the selection's), by name without "[It] ".
	cases map[string]testCase
	// ran are the specs of any name that ran (passed or failed, not skipped).
	ran map[string]testCase
	// suiteFailures are the suite-level nodes that did not pass, and reports that say the
	// suite did not succeed.
	suiteFailures []string
}

// suiteNode matches the name ginkgo's JUnit reporter gives a suite-level node.
var suiteNode = regexp.MustCompile(`^\[(SynchronizedBeforeSuite|BeforeSuite|SynchronizedAfterSuite|AfterSuite|DeferCleanup \(Suite\)|ReportBeforeSuite|ReportAfterSuite)\]`)

// outcome is a spec's result in one column of the table.
type outcome string

const (
	pass   outcome = "pass"
	fail   outcome = "fail"
	skip   outcome = "skip"
	notRun outcome = "not run"
)

// The JUnit statuses of ginkgo's spec states that are not failures.
const (
	passed  = "passed"
	skipped = "skipped"
)

func outcomeOf(c testCase, ok bool) outcome {
	switch {
	case !ok:
		return notRun
	case c.Status == passed:
		return pass
	case c.Status == skipped || c.Status == "pending" || c.Skipped != nil && c.Failure == nil && c.Error == nil:
		return skip
	default: // failed, panicked, interrupted, aborted, timedout
		return fail
	}
}

func parse(file string) (report, error) {
	var rep report
	data, err := os.ReadFile(file)
	if err != nil {
		return rep, err
	}
	if err := xml.Unmarshal(data, &rep); err != nil {
		return rep, fmt.Errorf("%s: %w", file, err)
	}
	return rep, nil
}

// readRun reads one run's reports (e2e.test processes that ran side by side). A spec a second
// report also lists, skipped by its focus, does not hide a result.
func readRun(name string, files []string, sel selection) (run, error) {
	r := run{name: name, cases: map[string]testCase{}, ran: map[string]testCase{}}
	for _, file := range files {
		rep, err := parse(file)
		if err != nil {
			return run{}, fmt.Errorf("run %s: %w", name, err)
		}
		for _, s := range rep.Suites {
			specFailed := false
			for _, c := range s.Cases {
				specFailed = r.add(file, c, sel) || specFailed
			}
			// A failed spec makes the suite fail too; without one, the suite failed around the
			// specs (a timeout, an interrupt, a failing report node).
			if prop(s.Properties, "SuiteSucceeded") == "false" && !specFailed {
				r.suiteFailures = append(r.suiteFailures, fmt.Sprintf("%s: the suite did not succeed (SuiteSucceeded=false, SpecialSuiteFailureReason %q)",
					file, prop(s.Properties, "SpecialSuiteFailureReason")))
			}
		}
	}
	return r, nil
}

// add records one <testcase> of a report of the run; it says whether it is a spec that failed.
func (r *run) add(file string, c testCase, sel selection) (specFailed bool) {
	o := outcomeOf(c, true)
	if suiteNode.MatchString(c.Name) {
		if o != pass && o != skip {
			r.suiteFailures = append(r.suiteFailures, fmt.Sprintf("%s: %s %s: %s", file, c.Name, c.Status, failureMessage(c)))
		}
		return false
	}
	c.Name = strings.TrimPrefix(c.Name, "[It] ")
	if o == pass || o == fail {
		r.ran[c.Name] = c
	}
	if old, ok := r.cases[c.Name]; sel.listed(c.Name) && (!ok || old.Status == skipped) {
		r.cases[c.Name] = c
	}
	return o == fail
}

type property struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

func prop(props []property, name string) string {
	for _, p := range props {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}

func failureMessage(c testCase) string {
	switch {
	case c.Failure != nil:
		return c.Failure.Message
	case c.Error != nil:
		return c.Error.Message
	}
	return ""
}

// readExpected returns the specs a dry run of e2e.test (-ginkgo.dry-run, the runs' focus and
// skip) selects: in its report, those it "passed". A report that is not of a dry run is refused,
// so that a real run's report cannot stand in for the list.
func readExpected(files []string) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	for _, file := range files {
		rep, err := parse(file)
		if err != nil {
			return nil, fmt.Errorf("-expect: %w", err)
		}
		for _, s := range rep.Suites {
			if prop(s.Properties, "DryRun") != "true" {
				return nil, fmt.Errorf("-expect: %s is not the report of a dry run (no DryRun=true property): run e2e.test -ginkgo.dry-run with the same focus and skip", file)
			}
			for _, c := range s.Cases {
				name, isSpec := strings.CutPrefix(c.Name, "[It] ")
				if isSpec && c.Status == passed && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
		}
	}
	return names, nil
}

// selection is the -match and -exclude expressions.
type selection struct{ match, exclude []*regexp.Regexp }

func newSelection(exprs []string) (selection, error) {
	var s selection
	for _, m := range exprs {
		list := &s.match
		if rest, ok := strings.CutPrefix(m, "!"); ok {
			m, list = rest, &s.exclude
		}
		re, err := regexp.Compile(m)
		if err != nil {
			return s, fmt.Errorf("-match %q: %w", m, err)
		}
		*list = append(*list, re)
	}
	return s, nil
}

func (s selection) listed(name string) bool {
	for _, re := range s.exclude {
		if re.MatchString(name) {
			return false
		}
	}
	for _, re := range s.match {
		if re.MatchString(name) {
			return true
		}
	}
	return len(s.match) == 0
}

// note is a line of the notes file: why a spec does not run here with any image
// ("REGEXP<TAB>reason"), or why its outcome differs between the images
// ("differs<TAB>REGEXP<TAB>reason"). The two are apart on purpose: that this environment cannot
// run a spec says nothing about one image passing it where the other skips it.
type note struct {
	re      *regexp.Regexp
	reason  string
	differs bool
}

// noteReason is the reason of the first note of the kind (differs or not) matching name.
func noteReason(name string, notes []note, differs bool) string {
	for _, nt := range notes {
		if nt.differs == differs && nt.re.MatchString(name) {
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
		fields := strings.Split(t, "\t")
		differs := len(fields) == 3 && fields[0] == "differs"
		if differs {
			fields = fields[1:]
		}
		if len(fields) != 2 || strings.TrimSpace(fields[1]) == "" {
			return nil, fmt.Errorf("%s:%d: want REGEXP<TAB>reason or differs<TAB>REGEXP<TAB>reason", file, line)
		}
		re, err := regexp.Compile(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		notes = append(notes, note{re: re, reason: strings.TrimSpace(fields[1]), differs: differs})
	}
	return notes, s.Err()
}
