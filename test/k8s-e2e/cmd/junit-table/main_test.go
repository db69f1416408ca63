package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A report in the shape e2e.test writes (ginkgo's JUnit reporter): a passed spec, a failed one,
// one skipped at run time with a reason, and one the focus left out.
const oursReport = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" disabled="0" errors="0" failures="2" time="100">
  <testsuite name="Kubernetes e2e suite" package="/" tests="4" disabled="0" skipped="2" errors="0" failures="2" time="100">
    <testcase name="[It] [sig-storage] A should pass" classname="Kubernetes e2e suite" status="passed" time="12.4"></testcase>
    <testcase name="[It] [sig-storage] B should work | really" classname="Kubernetes e2e suite" status="failed" time="30">
      <failure message="timed out" type="failed">boom</failure>
    </testcase>
    <testcase name="[It] [sig-storage] C block" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped - Driver does not support block volume mode"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] unrelated" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-storage] D fails here" classname="Kubernetes e2e suite" status="failed" time="5">
      <failure message="no cloud" type="failed">x</failure>
    </testcase>
  </testsuite>
</testsuites>`

const upstreamReport = `<testsuites><testsuite>
    <testcase name="[It] [sig-storage] A should pass" status="passed" time="10"></testcase>
    <testcase name="[It] [sig-storage] B should work | really" status="passed" time="20"></testcase>
    <testcase name="[It] [sig-storage] C block" status="skipped" time="0"><skipped message="skipped - Driver does not support block volume mode"></skipped></testcase>
    <testcase name="[It] [sig-storage] D fails here" status="failed" time="5"><failure message="no cloud"></failure></testcase>
</testsuite></testsuites>`

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTableAndCheck(t *testing.T) {
	dir := t.TempDir()
	ours := write(t, dir, "ours.xml", oursReport)
	upstream := write(t, dir, "upstream.xml", upstreamReport)
	notes := write(t, dir, "notes.tsv", "# comment\nD fails\tneeds a cloud\n")

	var out strings.Builder
	err := generate([]string{`sig-storage`}, notes, true, []string{"ours=" + ours, "upstream=" + upstream}, &out)
	table := out.String()
	for _, want := range []string{
		"| test | ours | upstream | note |",
		"| [sig-storage] A should pass | pass (12 s) | pass (10 s) |  |",
		`| [sig-storage] B should work \| really | **FAIL** | pass (20 s) | fails with ours only |`,
		"| [sig-storage] C block | skip | skip | Driver does not support block volume mode |",
		"| [sig-storage] D fails here | **FAIL** | **FAIL** | needs a cloud |",
	} {
		if !strings.Contains(table, want+"\n") {
			t.Errorf("table lacks line %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "unrelated") {
		t.Errorf("a test no -match selects is listed:\n%s", table)
	}
	// B fails with ours alone: the verdict names it, and only it (D is explained by a note).
	if err == nil || !strings.Contains(err.Error(), "B should work") || strings.Contains(err.Error(), "D fails") {
		t.Errorf("check: got %v, want an error naming B only", err)
	}

	// Without the note, D is unexplained too.
	out.Reset()
	err = generate([]string{`sig-storage`}, "", true, []string{"ours=" + ours, "upstream=" + upstream}, &out)
	if err == nil || !strings.Contains(err.Error(), "D fails") {
		t.Errorf("check without notes: got %v, want D named", err)
	}
}

// Two reports of one run (two e2e.test processes side by side): each lists the other's specs as
// skipped by its focus, which must not hide the result; -exclude drops a test.
func TestSeveralReportsAndExclude(t *testing.T) {
	dir := t.TempDir()
	a := write(t, dir, "a.xml", `<testsuites><testsuite>
    <testcase name="[It] [sig-storage] A should pass" status="passed" time="3"></testcase>
    <testcase name="[It] [sig-storage] B other" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-storage] W [Feature:Windows]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>`)
	b := write(t, dir, "b.xml", `<testsuites><testsuite>
    <testcase name="[It] [sig-storage] A should pass" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-storage] B other" status="passed" time="4"></testcase>
</testsuite></testsuites>`)
	var out strings.Builder
	if err := generate([]string{"sig-storage", `!\[Feature:Windows\]`}, "", true, []string{"ours=" + a + "," + b}, &out); err != nil {
		t.Fatal(err)
	}
	want := "| test | ours | note |\n|---|---|---|\n| [sig-storage] A should pass | pass (3 s) |  |\n| [sig-storage] B other | pass (4 s) |  |\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := write(t, dir, "notes.tsv", "no tab here\n")
	ours := write(t, dir, "ours.xml", oursReport)
	for name, args := range map[string][]string{
		"no runs":      nil,
		"no file":      {"ours"},
		"missing file": {"ours=" + filepath.Join(dir, "nope.xml")},
		"not xml":      {"ours=" + bad},
	} {
		if err := generate(nil, "", false, args, &strings.Builder{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := generate(nil, bad, false, []string{"ours=" + ours}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "REGEXP<TAB>reason") {
		t.Errorf("bad notes: got %v", err)
	}
	if err := generate([]string{"("}, "", false, []string{"ours=" + ours}, &strings.Builder{}); err == nil {
		t.Error("bad -match: no error")
	}
}
