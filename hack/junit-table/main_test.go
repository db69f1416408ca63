package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The spec names of the recorded reports in testdata/ (a CI-subset run: the mock driver's
// Expansion with recovery, csi-driver-host-path's volume-expand; X is skipped at run time by
// both images, the environment's reason in testdata/notes.tsv).
const (
	specA = "[sig-storage] CSI Mock volume expansion Expansion with recovery should record target size in allocated resources"
	specB = "[sig-storage] CSI Mock volume expansion Expansion with recovery should allow recovery if controller expansion fails with final error"
	specX = "External Storage [Driver: hostpath.csi.k8s.io] [Testpattern: Dynamic PV (xfs)] [Slow] volume-expand Verify if offline PVC expansion works"
)

func td(name string) string { return filepath.Join("testdata", name) }

// checkOpts is how hack/k8s-e2e.sh calls the verdict: the focus as -match, the dry run's
// report as -expect, the notes, e2e.test's exit statuses.
func checkOpts(exits map[string]string) options {
	return options{
		matches:   []string{`CSI Mock volume expansion Expansion with recovery`, `External Storage \[Driver: hostpath\.csi\.k8s\.io\].*volume-expand`, `!\[Feature:Windows\]`},
		notesFile: td("notes.tsv"),
		check:     true,
		expect:    []string{td("dryrun.xml")},
		exits:     exits,
	}
}

// TestVerdict feeds the verdict the recorded reports of a clean run and of each way a run can
// go wrong while looking green, and asserts each is caught, by the rule meant for it.
func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		runs  []string
		exits map[string]string
		want  []string // in the error, each; none: the verdict passes
		not   []string // not in the error
	}{{
		name:  "clean, both images",
		runs:  []string{"ours=" + td("ours.xml"), "upstream=" + td("upstream.xml")},
		exits: map[string]string{"ours": "0", "upstream": "0"},
	}, {
		name:  "clean, ours alone (the CI subset)",
		runs:  []string{"ours=" + td("ours.xml")},
		exits: map[string]string{"ours": "0"},
	}, {
		name:  "e2e.test exit status not 0",
		runs:  []string{"ours=" + td("ours.xml"), "upstream=" + td("upstream.xml")},
		exits: map[string]string{"ours": "1", "upstream": "0"},
		want:  []string{"ours: e2e.test exited with status 1"},
		not:   []string{"upstream:", "suite-level", "not run", "no note"},
	}, {
		name:  "no exit status recorded",
		runs:  []string{"ours=" + td("ours.xml")},
		exits: map[string]string{},
		want:  []string{"ours: no e2e.test exit status recorded"},
	}, {
		name:  "fewer specs run than the focus selects",
		runs:  []string{"ours=" + td("ours-fewer.xml")},
		exits: map[string]string{"ours": "0"},
		want:  []string{"ours: ran 2 of the 4 specs the focus selects; not run and not explained by the notes: " + specB},
		not:   []string{"exited", "suite-level", specA + ";", specX},
	}, {
		name:  "SynchronizedBeforeSuite failure, exit status 0",
		runs:  []string{"ours=" + td("ours-suite-failure.xml")},
		exits: map[string]string{"ours": "0"},
		want: []string{
			"ours: suite-level failure: " + td("ours-suite-failure.xml") + ": [SynchronizedBeforeSuite] failed: Unexpected error: error waiting for all nodes to be ready",
			"SuiteSucceeded=false",
			"ours: ran 0 of the 4 specs",
		},
		not: []string{"exited"},
	}, {
		name:  "outcome differs between the images",
		runs:  []string{"ours=" + td("ours.xml"), "upstream=" + td("upstream-differs.xml")},
		exits: map[string]string{"ours": "0", "upstream": "0"},
		want:  []string{`"` + specX + `": skip with ours, pass with upstream, and no note explains the difference`},
		not:   []string{"exited", "suite-level", "not run and not explained"},
	}, {
		name:  "a spec fails",
		runs:  []string{"ours=" + td("ours-failed.xml"), "upstream=" + td("upstream.xml")},
		exits: map[string]string{"ours": "1", "upstream": "0"},
		want: []string{
			"ours: e2e.test exited with status 1",
			`ours: "` + specB + `" failed: Timed out after 300.000s`,
			`"` + specB + `": fail with ours, pass with upstream`,
		},
		// The failed spec explains the report's SuiteSucceeded=false.
		not: []string{"suite-level"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var table, log strings.Builder
			err := generate(checkOpts(tc.exits), tc.runs, &table, &log)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("verdict of a clean run: %v", err)
				}
				if !strings.Contains(log.String(), "ran 3 of the 4 specs the focus selects") {
					t.Errorf("no summary of the clean run: %q", log.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("the verdict passed; want it to fail with %q\ntable:\n%s", tc.want, table.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the verdict does not say %q:\n%v", w, err)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("the verdict says %q, which this case does not have:\n%v", n, err)
				}
			}
		})
	}
}

// A "differs" note explains a difference between the images; the environment's note of the
// same spec does not (the outcome-differs case above has it).
func TestVerdictDiffersNote(t *testing.T) {
	notes := filepath.Join(t.TempDir(), "notes.tsv")
	write(t, notes, "PV \\(xfs\\)\tDriver hostpath.csi.k8s.io doesn't support xfs\n"+
		"differs\tPV \\(xfs\\).*offline PVC expansion\tupstream's image reports a size this driver never had\n")
	opts := checkOpts(map[string]string{"ours": "0", "upstream": "0"})
	opts.notesFile = notes
	var table strings.Builder
	if err := generate(opts, []string{"ours=" + td("ours.xml"), "upstream=" + td("upstream-differs.xml")}, &table, &strings.Builder{}); err != nil {
		t.Fatalf("a difference the notes explain: %v", err)
	}
	if !strings.Contains(table.String(), "upstream's image reports a size this driver never had") {
		t.Errorf("the table does not show the difference's reason:\n%s", table.String())
	}
}

// The verdict refuses what would let it pass without evidence: no dry-run list, and a real
// run's report given as the dry run's.
func TestVerdictNeedsTheDryRun(t *testing.T) {
	runs := []string{"ours=" + td("ours.xml")}
	opts := checkOpts(map[string]string{"ours": "0"})
	opts.expect = nil
	if err := generate(opts, runs, &strings.Builder{}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "-check needs -expect") {
		t.Errorf("-check without -expect: got %v", err)
	}
	opts.expect = []string{td("ours.xml")}
	if err := generate(opts, runs, &strings.Builder{}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "is not the report of a dry run") {
		t.Errorf("-expect of a real run: got %v", err)
	}
	// A dry run that selects nothing: a focus that matches no spec.
	none := filepath.Join(t.TempDir(), "dryrun.xml")
	data, err := os.ReadFile(td("dryrun.xml"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, none, strings.ReplaceAll(string(data), `status="passed"`, `status="skipped"`))
	opts.expect = []string{none}
	if err := generate(opts, runs, &strings.Builder{}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "the dry run selects no spec") {
		t.Errorf("-expect selecting nothing: got %v", err)
	}
	// A dry-run list of another focus: a spec ran that it does not select.
	other := filepath.Join(t.TempDir(), "dryrun.xml")
	write(t, other, strings.Replace(string(data), `"[It] `+specA+`" classname="Kubernetes e2e suite" status="passed"`, `"[It] `+specA+`" classname="Kubernetes e2e suite" status="skipped"`, 1))
	opts.expect = []string{other}
	if err := generate(opts, runs, &strings.Builder{}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "ran but the dry run did not select it") {
		t.Errorf("-expect of another focus: got %v", err)
	}
}

func TestTable(t *testing.T) {
	opts := checkOpts(nil)
	opts.check = false
	var table strings.Builder
	if err := generate(opts, []string{"ours=" + td("ours-failed.xml"), "upstream=" + td("upstream.xml")}, &table, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| test | ours | upstream | note |\n|---|---|---|---|\n",
		"| " + specA + " | pass (53 s) | pass (49 s) |  |\n",
		"| " + specB + " | **FAIL** | pass (83 s) | fails with ours only |\n",
		"| " + specX + " | skip | skip | Driver hostpath.csi.k8s.io doesn't support xfs |\n",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "sig-apps") {
		t.Errorf("a spec no -match selects is listed:\n%s", table.String())
	}
	// A run that ran nothing still has a row for each selected spec.
	table.Reset()
	if err := generate(opts, []string{"ours=" + td("ours-fewer.xml")}, &table, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "| "+specB+" | not run |") {
		t.Errorf("a selected spec absent from the report has no row:\n%s", table.String())
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Two reports of one run (two e2e.test processes side by side): each lists the other's specs as
// skipped by its focus, which must not hide the result; -exclude drops a spec.
func TestSeveralReportsAndExclude(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.xml"), filepath.Join(dir, "b.xml")
	write(t, a, `<testsuites><testsuite>
    <testcase name="[It] [sig-storage] A should pass" status="passed" time="3"></testcase>
    <testcase name="[It] [sig-storage] B other" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-storage] W [Feature:Windows]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>`)
	write(t, b, `<testsuites><testsuite>
    <testcase name="[It] [sig-storage] A should pass" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-storage] B other" status="passed" time="4"></testcase>
</testsuite></testsuites>`)
	var out strings.Builder
	if err := generate(options{matches: []string{"sig-storage", `!\[Feature:Windows\]`}}, []string{"ours=" + a + "," + b}, &out, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	want := "| test | ours | note |\n|---|---|---|\n| [sig-storage] A should pass | pass (3 s) |  |\n| [sig-storage] B other | pass (4 s) |  |\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "notes.tsv")
	write(t, bad, "no tab here\n")
	ours := td("ours.xml")
	for name, args := range map[string][]string{
		"no runs":      nil,
		"no file":      {"ours"},
		"missing file": {"ours=" + filepath.Join(dir, "nope.xml")},
		"not xml":      {"ours=" + bad},
	} {
		if err := generate(options{}, args, &strings.Builder{}, &strings.Builder{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := generate(options{notesFile: bad}, []string{"ours=" + ours}, &strings.Builder{}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "REGEXP<TAB>reason") {
		t.Errorf("bad notes: got %v", err)
	}
	if err := generate(options{matches: []string{"("}}, []string{"ours=" + ours}, &strings.Builder{}, &strings.Builder{}); err == nil {
		t.Error("bad -match: no error")
	}
}
