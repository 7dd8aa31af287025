// Package docs holds the guides beyond the README (operations, clients,
// development) and the tests that keep the README and them joined up, and
// the repository's words readable without its issue tracker.
package docs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// guides are the Markdown files a reader moves between, relative to the
// repository's root: the README and every file of docs/.
func guides(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 3 {
		t.Fatalf("docs/ holds %v: want operations.md, client.md and development.md at least", docs)
	}
	for _, d := range docs {
		files = append(files, "docs/"+d)
	}
	return files
}

func readRoot(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// prose returns text's lines outside fenced code blocks, numbered from 1
// (a fenced line is "").
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	return lines
}

var heading = regexp.MustCompile(`^#{1,6} +(.*?) *#*$`)

// anchors returns the fragments a renderer gives text's headings, as
// GitHub makes them: lower case, every character but letters, digits,
// spaces, '-' and '_' dropped, spaces made '-'; a repeated one gets -1,
// -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: every relative link of the README and of
// docs/*.md names a file or directory of the repository, and every
// #anchor a heading of the Markdown file it points into. Text moved
// between them must take its links along.
func TestRelativeLinksResolve(t *testing.T) {
	files := guides(t)
	texts := map[string]string{}
	for _, f := range files {
		texts[f] = readRoot(t, f)
	}
	checked := 0
	for _, f := range files {
		for n, l := range prose(texts[f]) {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				to := f
				if file != "" {
					to = path.Join(path.Dir(f), file)
					if strings.HasPrefix(to, "../") {
						t.Errorf("%s:%d: %s leaves the repository", f, n+1, target)
						continue
					}
					if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(to))); err != nil {
						t.Errorf("%s:%d: %s: no %s", f, n+1, target, to)
						continue
					}
				}
				if frag == "" {
					continue
				}
				text, ok := texts[to]
				if !ok {
					if !strings.HasSuffix(to, ".md") {
						t.Errorf("%s:%d: %s: an anchor into %s, which is not Markdown", f, n+1, target, to)
						continue
					}
					text = readRoot(t, to)
				}
				if !anchors(text)[frag] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", f, n+1, target, to, frag)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("%d links checked: the test no longer finds the guides' links", checked)
	}
}

// TestAnchors pins the heading-to-fragment rule on the headings the
// guides use.
func TestAnchors(t *testing.T) {
	for _, tc := range []struct{ heading, anchor string }{
		{"## What it promises", "what-it-promises"},
		{"### Leaves in bulk: `processor leave --from`", "leaves-in-bulk-processor-leave---from"},
		{"### A topic's limit changed while running", "a-topics-limit-changed-while-running"},
		{"### From Go: pkg/client", "from-go-pkgclient"},
		{"## Contracts: AsyncAPI and JSON Schema", "contracts-asyncapi-and-json-schema"},
	} {
		if got := anchors(tc.heading); !got[tc.anchor] || len(got) != 1 {
			t.Errorf("%q: anchors %v, want %q", tc.heading, got, tc.anchor)
		}
	}
	if got := anchors("## Soak\n\n## Soak\n"); !got["soak"] || !got["soak-1"] {
		t.Errorf("a repeated heading: anchors %v, want soak and soak-1", got)
	}
	if got := anchors("```sh\n# not a heading\n```\n"); len(got) != 0 {
		t.Errorf("a comment in a code block: anchors %v, want none", got)
	}
}

// TestReadmeFirstCommands: the README opens with the two commands of its
// first screen, each a target of the Makefile.
func TestReadmeFirstCommands(t *testing.T) {
	readme := readRoot(t, "README.md")
	_, block, ok := strings.Cut(readme, "```sh\n")
	if !ok {
		t.Fatal("README.md has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		cmd, _, _ := strings.Cut(l, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	if strings.Join(cmds, "; ") != "make run; make test" {
		t.Fatalf("README.md's first commands are %q, want make run and make test", cmds)
	}
	makefile := readRoot(t, "Makefile")
	for _, target := range []string{"run", "test"} {
		if !regexp.MustCompile(`(?m)^` + target + `:`).MatchString(makefile) {
			t.Errorf("the Makefile has no target %s", target)
		}
	}
}

// TestReadmeFlagsAreOperations: each row of the README's short table of
// flags is a row of the full table in docs/operations.md, word for word
// but for where its links point, so the two cannot drift apart.
func TestReadmeFlagsAreOperations(t *testing.T) {
	rows := func(name, section string) []string {
		text := readRoot(t, name)
		i := strings.Index(text, section+"\n")
		if i < 0 {
			t.Fatalf("%s has no %q", name, section)
		}
		text = text[i+len(section):]
		if j := strings.Index(text, "\n#"); j >= 0 {
			text = text[:j]
		}
		var out []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "| `--") {
				out = append(out, link.ReplaceAllString(l, "]"))
			}
		}
		return out
	}
	full := map[string]bool{}
	for _, r := range rows("docs/operations.md", "## Configuration") {
		full[r] = true
	}
	if len(full) < 20 {
		t.Fatalf("docs/operations.md's configuration table has %d rows: the test reads it wrong", len(full))
	}
	short := rows("README.md", "## Configuration")
	if len(short) == 0 {
		t.Fatal("README.md's Configuration has no table of flags")
	}
	for _, r := range short {
		if !full[r] {
			t.Errorf("README.md's row\n\t%s\nis not in docs/operations.md's table", r)
		}
	}
}

// TestWhereTheCodeLivesNamesRealFiles: every file and directory the
// README's "Where the code lives" names exists, so a file renamed or
// moved takes the newcomer's map along. A bare name ending in .go is a
// file of pkg/fanout; a name with a slash is a path from the root.
func TestWhereTheCodeLivesNamesRealFiles(t *testing.T) {
	readme := readRoot(t, "README.md")
	i := strings.Index(readme, "\n## Where the code lives\n")
	if i < 0 {
		t.Fatal(`README.md has no "## Where the code lives"`)
	}
	section := readme[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	if n := strings.Count(section, "\n"); n > 40 {
		t.Errorf("Where the code lives is %d lines: a map, not a guide", n)
	}
	named := 0
	for _, m := range regexp.MustCompile("`([a-z_./]+)`").FindAllStringSubmatch(section, -1) {
		name := m[1]
		var p string
		switch {
		case strings.Contains(name, "/"):
			p = strings.TrimSuffix(name, "/")
		case strings.HasSuffix(name, ".go"):
			p = "pkg/fanout/" + name
		default:
			continue // a package named within integration/, or a word
		}
		named++
		if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(p))); err != nil {
			t.Errorf("Where the code lives names %s: no %s", name, p)
		}
	}
	if named < 20 {
		t.Fatalf("%d paths found in Where the code lives: the test reads it wrong", named)
	}
}

// citation is a pointer at a numbered issue or its section, which means
// nothing to a reader of the repository.
var citation = regexp.MustCompile(`(?i)\bissues? #?[0-9]+|§ ?[0-9]`)

// TestNoIssueCitations: code, comments, report strings, the Makefile and
// the guides say the reason or the test's name, never "issue N" or
// "§M". BENCHMARKS.md is history: its old sections keep their headings.
func TestNoIssueCitations(t *testing.T) {
	checked := 0
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != ".." && (strings.HasPrefix(name, ".") && name != ".ci" || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasPrefix(name, "BENCHMARKS"):
			return nil
		case name == "Makefile", strings.HasSuffix(name, ".go"), strings.HasSuffix(name, ".md"),
			strings.HasSuffix(name, ".sh"), filepath.Base(filepath.Dir(p)) == ".ci":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		checked++
		for n, l := range strings.Split(string(b), "\n") {
			if m := citation.FindString(l); m != "" {
				t.Errorf("%s:%d: %q: say the reason or the test's name", strings.TrimPrefix(filepath.ToSlash(p), "../"), n+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("%d files checked: the test no longer finds the code", checked)
	}
}

// cited is a pointer of the Go code into a guide: README, "The rules,
// precisely" or docs/operations.md, "Least privilege (ACLs)" (in a
// comment, a raw string or an escaped one).
var cited = regexp.MustCompile(`\b(README(?:\.md)?|docs/[a-z]+\.md)(?:'s|,) \\?"([^"\\]+)\\?"`)

// TestCitedSectionsExist: each section of a guide that Go code names in
// the form above — in a comment, or in an error an operator reads — is
// there: a heading of that file that begins with the words cited, or a
// paragraph that opens with them ("Tombstones."). Text moved between
// the guides must take the code's pointers along.
func TestCitedSectionsExist(t *testing.T) {
	continued := regexp.MustCompile(`\n\s*// ?`)
	found := 0
	texts := map[string][]string{}
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || filepath.Base(p) == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range cited.FindAllStringSubmatch(continued.ReplaceAllString(string(b), " "), -1) {
			guide, words := m[1], m[2]
			if guide == "README" {
				guide = "README.md"
			}
			lines, ok := texts[guide]
			if !ok {
				lines = prose(readRoot(t, guide))
				texts[guide] = lines
			}
			found++
			if !opensWith(lines, words) {
				t.Errorf("%s cites %s, %q: no heading or paragraph there begins so",
					strings.TrimPrefix(filepath.ToSlash(p), "../"), guide, words)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("%d citations found: the test no longer reads the code right", found)
	}
}

// opensWith says whether a heading of lines begins with words, or a
// paragraph with words and a full stop or a colon.
func opensWith(lines []string, words string) bool {
	for i, l := range lines {
		if m := heading.FindStringSubmatch(l); m != nil && strings.HasPrefix(m[1], words) {
			return true
		}
		if (i == 0 || lines[i-1] == "") && (strings.HasPrefix(l, words+".") || strings.HasPrefix(l, words+":")) {
			return true
		}
	}
	return false
}
