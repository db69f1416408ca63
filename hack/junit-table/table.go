package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// cell is what a run's column shows for one spec.
func cell(c testCase, ok bool) string {
	switch outcomeOf(c, ok) {
	case notRun:
		return "not run"
	case pass:
		return "pass (" + strconv.Itoa(int(c.Time+0.5)) + " s)"
	case skip:
		return "skip"
	}
	return "**FAIL**"
}

// writeTable writes one row per spec listed in any run or selected by the dry run.
func writeTable(out io.Writer, runs []run, expected []string, notes []note) {
	names := map[string]bool{}
	for _, n := range expected {
		names[n] = true
	}
	for _, r := range runs {
		for n := range r.cases {
			names[n] = true
		}
	}
	header := "| test |"
	rule := "|---|"
	for _, r := range runs {
		header += " " + r.name + " |"
		rule += "---|"
	}
	fmt.Fprintln(out, header+" note |")
	fmt.Fprintln(out, rule+"---|")
	for _, n := range sortedKeys(names) {
		row := "| " + escape(n) + " |"
		passes := make([]bool, len(runs))
		for i, r := range runs {
			c, ok := r.cases[n]
			passes[i] = outcomeOf(c, ok) == pass
			row += " " + cell(c, ok) + " |"
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
	for _, differs := range []bool{false, true} {
		if reason := noteReason(name, notes, differs); reason != "" {
			parts = append(parts, reason)
		}
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
