package client_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocsShowExampleIntent: the package documentation (what go doc -all
// prints) and docs/client.md show ExampleIntent's code as it runs in the
// tests, so neither can drift into code that does not compile or that
// panics (a receipt read without checking it is there).
func TestDocsShowExampleIntent(t *testing.T) {
	src := read(t, "example_test.go")
	i := strings.Index(src, "func ExampleIntent() {")
	if i < 0 {
		t.Fatal("no ExampleIntent in example_test.go")
	}
	body := src[i:]
	body = body[strings.Index(body, "defer done()")+len("defer done()") : strings.Index(body, "// Output:")]
	want := codeLines(body)
	if len(want) < 10 {
		t.Fatalf("ExampleIntent's body is %d lines: the test reads it wrong", len(want))
	}
	var pkgDoc []string
	for _, l := range strings.Split(read(t, "doc.go"), "\n") {
		if code, ok := strings.CutPrefix(l, "//\t"); ok {
			pkgDoc = append(pkgDoc, code)
		}
	}
	guide := read(t, "../../docs/client.md")
	i = strings.Index(guide, "### From Go: pkg/client")
	if i < 0 {
		t.Fatal(`docs/client.md has no "### From Go: pkg/client"`)
	}
	guide = guide[i:]
	guide = guide[strings.Index(guide, "```go"):]
	guide = guide[:strings.Index(guide[5:], "```")+5]
	for name, text := range map[string]string{"doc.go": strings.Join(pkgDoc, "\n"), "docs/client.md": guide} {
		if !strings.Contains(strings.Join(codeLines(text), "\n"), strings.Join(want, "\n")) {
			t.Errorf("%s does not show ExampleIntent's code:\n%s", name, strings.Join(want, "\n"))
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeLines returns text's non-blank lines, trimmed of indentation.
func codeLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
