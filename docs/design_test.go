// Package docs holds the project's documentation. Its test keeps docs/design.md and the
// references to it honest: code comments cite the design by section and rule
// ("docs/design.md §2.3 rule 6"), and a reference that leads nowhere is worse than none.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// design is the parsed docs/design.md: its numbered sections and the rules each holds.
type design struct {
	// titles maps a section number ("2.3") to its heading title.
	titles map[string]string
	// rules maps a section number to the rule numbers in it or in its subsections.
	rules map[string]map[int]bool
}

var (
	headingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*$`)
	numberedRE = regexp.MustCompile(`^(\d+(?:\.\d+)*)\.?\s+(.+)$`)
	ruleRE     = regexp.MustCompile(`^\*\*Rule (\d+)\.\*\*`)
)

// parseDesign reads the conventions that design.md states at its top: numbered headings are
// sections, a paragraph opening with "**Rule N.**" is rule N of the nearest section above it and
// of that section's parents, and rule numbers are unique and gap-free within a top-level section.
func parseDesign(text string) (*design, []string) {
	d := &design{titles: map[string]string{}, rules: map[string]map[int]bool{}}
	var problems []string
	current := ""
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		where := fmt.Sprintf("docs/design.md:%d", i+1)
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			current = ""
			if n := numberedRE.FindStringSubmatch(m[2]); n != nil {
				current = n[1]
				if _, dup := d.titles[current]; dup {
					problems = append(problems, fmt.Sprintf("%s: section %s is numbered twice; give the new section the next free number", where, current))
				}
				d.titles[current] = n[2]
			}
			continue
		}
		m := ruleRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if current == "" {
			problems = append(problems, fmt.Sprintf("%s: rule %d is not under a numbered heading, so it cannot be cited", where, n))
			continue
		}
		for s := current; s != ""; s = parent(s) {
			if d.rules[s] == nil {
				d.rules[s] = map[int]bool{}
			}
			if d.rules[s][n] {
				problems = append(problems, fmt.Sprintf("%s: §%s rule %d is ambiguous: section %s already has a rule %d; use the next free number", where, current, n, s, n))
			}
			d.rules[s][n] = true
		}
	}
	for s, rules := range d.rules {
		if parent(s) != "" {
			continue
		}
		for n := 1; n <= len(rules); n++ {
			if !rules[n] {
				problems = append(problems, fmt.Sprintf("docs/design.md: the rules of §%s skip number %d; rules are never renumbered, mark a dropped one withdrawn instead", s, n))
			}
		}
	}
	return d, problems
}

// parent returns the enclosing section number: "2.3" -> "2", "2" -> "".
func parent(section string) string {
	i := strings.LastIndex(section, ".")
	if i < 0 {
		return ""
	}
	return section[:i]
}

var (
	// A reference: "design.md" (normally "docs/design.md") and one or more "§X[ rule(s) N...]"
	// items, e.g. "docs/design.md §2.3 rules 1-4, §2.6".
	refRE  = regexp.MustCompile(`design\.md,?[ \t]*(§[ \t]*\d+(?:\.\d+)*(?:[ \t]+rules?[ \t]+\d+(?:[ \t]*(?:-|–|,|and|or)[ \t]*\d+)*)?(?:[ \t]*(?:,|;|and|or)[ \t]*§[ \t]*\d+(?:\.\d+)*(?:[ \t]+rules?[ \t]+\d+(?:[ \t]*(?:-|–|,|and|or)[ \t]*\d+)*)?)*)`)
	itemRE = regexp.MustCompile(`§[ \t]*(\d+(?:\.\d+)*)(?:[ \t]+rules?[ \t]+(\d+(?:[ \t]*(?:-|–|,|and|or)[ \t]*\d+)*))?`)
	// A reference by title: docs/design.md, "One reconcile shape".
	titleRefRE = regexp.MustCompile(`design\.md,?[ \t]*["“]([^"”\n]{3,100})["”]`)
	numberRE   = regexp.MustCompile(`\d+|-|–`)
	// The design document that lived outside the repository, cited by its upper-case name with
	// or without ".md", before a section sign or alone.
	staleRE = regexp.MustCompile(`\bDESIGN(?:\.md)?[ \t]*§|\bDESIGN\.md\b`)
	// Line joins inside a comment or a paragraph, so a reference broken over two lines is read
	// whole: "\n" plus the next line's indentation and comment marker.
	goJoinRE = regexp.MustCompile(`[ \t]*\n[ \t]*(?://[ \t]*)?`)
	mdJoinRE = regexp.MustCompile(`[ \t]*\n[ \t]*`)
)

// checkFile returns the problems of one file's references to the design.
func (d *design) checkFile(name, content string) []string {
	var problems []string
	join := mdJoinRE
	if strings.HasSuffix(name, ".go") {
		join = goJoinRE
	}
	text, lines := joinLines(content, join)
	for _, loc := range staleRE.FindAllStringIndex(text, -1) {
		problems = append(problems, fmt.Sprintf("%s:%d: %q cites the design document that is not in the repository; cite docs/design.md by section and rule instead (e.g. \"docs/design.md §2.3 rule 6\")",
			name, lines[loc[0]], text[loc[0]:loc[1]]))
	}
	for _, m := range refRE.FindAllStringSubmatchIndex(text, -1) {
		line := lines[m[0]]
		for _, item := range itemRE.FindAllStringSubmatch(text[m[2]:m[3]], -1) {
			for _, p := range d.checkItem(item[1], item[2]) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", name, line, p))
			}
		}
	}
	for _, m := range titleRefRE.FindAllStringSubmatchIndex(text, -1) {
		if title := text[m[2]:m[3]]; !d.hasTitle(title) {
			problems = append(problems, fmt.Sprintf("%s:%d: docs/design.md has no heading %q; cite the section by number (docs/design.md §N)", name, lines[m[0]], title))
		}
	}
	return problems
}

// checkItem checks one "§section rule(s) numbers" item.
func (d *design) checkItem(section, rules string) []string {
	if _, ok := d.titles[section]; !ok {
		return []string{fmt.Sprintf("docs/design.md has no section §%s; fix the reference or add the section", section)}
	}
	var problems []string
	for _, n := range ruleNumbers(rules) {
		if !d.rules[section][n] {
			problems = append(problems, fmt.Sprintf("docs/design.md §%s (%s) has no rule %d; fix the reference or add the rule", section, d.titles[section], n))
		}
	}
	return problems
}

// ruleNumbers expands "2 and 4", "1-4" or "6" into the rule numbers they name.
func ruleNumbers(list string) []int {
	var out []int
	tokens := numberRE.FindAllString(list, -1)
	for i := 0; i < len(tokens); i++ {
		n, err := strconv.Atoi(tokens[i])
		if err != nil {
			continue
		}
		if i+2 < len(tokens) && (tokens[i+1] == "-" || tokens[i+1] == "–") {
			if to, err := strconv.Atoi(tokens[i+2]); err == nil && to >= n && to-n < 100 {
				for k := n; k <= to; k++ {
					out = append(out, k)
				}
				i += 2
				continue
			}
		}
		out = append(out, n)
	}
	return out
}

func (d *design) hasTitle(title string) bool {
	for _, t := range d.titles {
		if strings.Contains(strings.ToLower(t), strings.ToLower(title)) {
			return true
		}
	}
	return false
}

// joinLines replaces every match of join with a space and returns, for each byte of the result,
// the 1-based line of the original it came from.
func joinLines(content string, join *regexp.Regexp) (string, []int) {
	var b strings.Builder
	lines := make([]int, 0, len(content)+1)
	line, last := 1, 0
	copyRange := func(from, to int) {
		for i := from; i < to; i++ {
			b.WriteByte(content[i])
			lines = append(lines, line)
			if content[i] == '\n' {
				line++
			}
		}
	}
	for _, loc := range join.FindAllStringIndex(content, -1) {
		copyRange(last, loc[0])
		b.WriteByte(' ')
		lines = append(lines, line)
		line += strings.Count(content[loc[0]:loc[1]], "\n")
		last = loc[1]
	}
	copyRange(last, len(content))
	lines = append(lines, line)
	return b.String(), lines
}

// skipDirs are not the project's own text: vendored modules, and the generated wrapper module
// that builds the Kubernetes binaries for the tests.
var skipDirs = map[string]bool{"vendor": true, "test/k8s-bins": true, ".git": true}

// skipFiles: this file holds broken references on purpose, to show the checker catches them.
var skipFiles = map[string]bool{"docs/design_test.go": true}

func loadDesign(t *testing.T) *design {
	t.Helper()
	text, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatalf("reading docs/design.md: %v", err)
	}
	d, problems := parseDesign(string(text))
	for _, p := range problems {
		t.Error(p)
	}
	return d
}

// TestDesignReferencesResolve scans every Go and Markdown file of the repository (vendor/ and
// test/k8s-bins/ excepted) for references to docs/design.md and fails on any section or rule
// that does not exist, and on any reference to the old design document outside the repository.
func TestDesignReferencesResolve(t *testing.T) {
	d := loadDesign(t)
	root := ".."
	var problems []string
	refs := 0
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if skipDirs[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		if skipFiles[rel] || !strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, ".md") {
			return nil
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		refs += len(refRE.FindAllStringIndex(string(content), -1))
		problems = append(problems, d.checkFile(rel, string(content))...)
		return nil
	})
	if err != nil {
		t.Fatalf("walking the repository: %v", err)
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	if refs == 0 {
		t.Error("found no reference to docs/design.md at all: the scan is not reading the repository")
	}
}

// TestDesignConventions checks that the sections and rules the code has always cited exist, so
// a reorganisation of design.md that breaks them fails here even before a comment cites them.
func TestDesignConventions(t *testing.T) {
	d := loadDesign(t)
	for _, s := range []string{"1", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "3", "3.5", "4", "5"} {
		if _, ok := d.titles[s]; !ok {
			t.Errorf("docs/design.md lost section §%s", s)
		}
	}
	for section, n := range map[string]int{"2.3": 10, "3": 6, "5": 9} {
		for k := 1; k <= n; k++ {
			if !d.rules[section][k] {
				t.Errorf("docs/design.md lost §%s rule %d", section, k)
			}
		}
	}
	if !d.rules["3.5"][5] {
		t.Error("§3.5 must hold rule 5 of §3: code cites the two as the same text")
	}
}

// TestCheckerFindsBrokenReferences shows that the checker fails on what it is meant to catch.
func TestCheckerFindsBrokenReferences(t *testing.T) {
	d, problems := parseDesign("# T\n## 1. One\n**Rule 1.** a\n### 1.2 Sub\n**Rule 2.** b\n## 2. Two\n")
	if len(problems) != 0 {
		t.Fatalf("a valid design is reported broken: %v", problems)
	}
	stale := "DESIGN" + " §"
	for _, tc := range []struct {
		name, content string
		wantProblems  int
	}{
		{"good.go", "// see docs/design.md §1 rule 1, §1.2 rule 2 and docs/design.md §2\n", 0},
		{"range.go", "// docs/design.md §1 rules 1-2\n", 0},
		{"wrapped.go", "// as docs/design.md §1.2\n// rule 2 says\n", 0},
		{"title.go", "// (docs/design.md, \"Sub\")\n", 0},
		{"section.go", "// docs/design.md §3\n", 1},
		{"rule.go", "// docs/design.md §1 rules 1 and 7\n", 1},
		{"wrapped-bad.go", "// as docs/design.md §1.2\n// rule 3 says\n", 1},
		{"chained.go", "// docs/design.md §1 rule 1, §4\n", 1},
		{"wrong-title.go", "// (docs/design.md, \"No such heading\")\n", 1},
		{"stale.go", "// " + stale + "2.3 rule 6\n", 1},
		{"stale-wrapped.go", "\t// counts as ready (DESIGN\n\t// §3.5), with\n", 1},
		{"stale.md", "see DESIGN" + ".md for the rules\n", 1},
	} {
		if got := d.checkFile(tc.name, tc.content); len(got) != tc.wantProblems {
			t.Errorf("%s: got %d problems %q, want %d", tc.name, len(got), got, tc.wantProblems)
		}
	}
	for _, tc := range []struct{ text, want string }{
		{"# T\n## 1. A\n**Rule 1.** a\n**Rule 1.** b\n", "ambiguous"},
		{"# T\n## 1. A\n**Rule 1.** a\n### 1.1 B\n**Rule 3.** b\n", "skip number 2"},
		{"# T\n## A\n**Rule 1.** a\n", "not under a numbered heading"},
		{"# T\n## 1. A\n## 1. B\n", "numbered twice"},
	} {
		_, problems := parseDesign(tc.text)
		if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
			t.Errorf("parseDesign(%q) = %q, want one problem saying %q", tc.text, problems, tc.want)
		}
	}
}
