package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// verdict returns an error listing every reason the runs are not a clean result (the command's
// doc lists them), or nil after writing one line per run to log.
func verdict(runs []run, expected []string, exits map[string]string, notes []note, log io.Writer) error {
	var problems []string
	if len(expected) == 0 {
		problems = append(problems, "the dry run selects no spec: the focus matches nothing, and a run of nothing proves nothing")
	}
	for _, r := range runs {
		problems = append(problems, runProblems(r, expected, exits, notes)...)
	}
	for _, other := range runs[1:] {
		problems = append(problems, differences(runs[0], other, expected, notes)...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("the verdict: %d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	for _, r := range runs {
		fmt.Fprintf(log, "verdict: %s: e2e.test exit 0; ran %d of the %d specs the focus selects, every one not run explained by the notes; no suite-level failure\n",
			r.name, countRan(r, expected), len(expected))
	}
	return nil
}

// runProblems are one run's failures: its exit status, its suite-level failures, the selected
// specs it did not run without a note, the specs that ran unselected, the specs that failed.
func runProblems(r run, expected []string, exits map[string]string, notes []note) []string {
	var p []string
	switch status, ok := exits[r.name]; {
	case !ok:
		p = append(p, fmt.Sprintf("%s: no e2e.test exit status recorded (-exit %s=STATUS): a run without one is not a result", r.name, r.name))
	case status != "0":
		p = append(p, fmt.Sprintf("%s: e2e.test exited with status %s (its log says why)", r.name, status))
	}
	for _, f := range r.suiteFailures {
		p = append(p, fmt.Sprintf("%s: suite-level failure: %s", r.name, f))
	}
	selected := map[string]bool{}
	var missing []string
	for _, name := range expected {
		selected[name] = true
		if _, ran := r.ran[name]; !ran && noteReason(name, notes, false) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		p = append(p, fmt.Sprintf("%s: ran %d of the %d specs the focus selects; not run and not explained by the notes: %s",
			r.name, countRan(r, expected), len(expected), strings.Join(missing, "; ")))
	}
	for _, name := range sortedKeys(r.ran) {
		if !selected[name] {
			p = append(p, fmt.Sprintf("%s: %q ran but the dry run did not select it: -expect is not of this run's focus", r.name, name))
		}
		if outcomeOf(r.ran[name], true) == fail {
			p = append(p, fmt.Sprintf("%s: %q failed: %s", r.name, name, failureMessage(r.ran[name])))
		}
	}
	return p
}

// differences names the specs whose outcome in other is not the first run's, unless a
// "differs" note explains it: a spec skipped with one image and passed with the other is a
// finding, not noise, even where the environment explains the skip.
func differences(first, other run, expected []string, notes []note) []string {
	names := map[string]bool{}
	for _, n := range expected {
		names[n] = true
	}
	for _, r := range []run{first, other} {
		for n := range r.cases {
			names[n] = true
		}
		for n := range r.ran {
			names[n] = true
		}
	}
	var p []string
	for _, n := range sortedKeys(names) {
		a, b := runOutcome(first, n), runOutcome(other, n)
		if a != b && noteReason(n, notes, true) == "" {
			p = append(p, fmt.Sprintf("%q: %s with %s, %s with %s, and no note explains the difference", n, a, first.name, b, other.name))
		}
	}
	return p
}

// runOutcome is a spec's outcome in a run, whether or not -match lists it.
func runOutcome(r run, name string) outcome {
	if c, ok := r.ran[name]; ok {
		return outcomeOf(c, true)
	}
	c, ok := r.cases[name]
	return outcomeOf(c, ok)
}

func countRan(r run, expected []string) int {
	n := 0
	for _, name := range expected {
		if _, ok := r.ran[name]; ok {
			n++
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
