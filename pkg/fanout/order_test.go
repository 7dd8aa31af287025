package fanout

import (
	"go/types"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestReadingOrder holds the package to the reading order doc.go lists:
// the list names every file once, and no file uses what a file before it
// declares (no reference goes up the list). A reference is a use of a
// package-level name, a method or a field, as the type checker resolves
// it.
func TestReadingOrder(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedFiles |
		packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		t.Fatalf("loading the package: %d packages, errors %v", len(pkgs), pkgs[0].Errors)
	}
	pkg := pkgs[0]

	order := readingOrder(t, pkg)
	rank := make(map[string]int, len(order))
	for i, f := range order {
		if _, dup := rank[f]; dup {
			t.Errorf("doc.go lists %s twice", f)
		}
		rank[f] = i
	}
	var files []string
	for _, f := range pkg.GoFiles {
		files = append(files, filepath.Base(f))
	}
	for _, f := range files {
		if _, ok := rank[f]; !ok {
			t.Errorf("doc.go's reading order does not list %s", f)
		}
	}
	for _, f := range order {
		if !slices.Contains(files, f) {
			t.Errorf("doc.go's reading order lists %s, which is not a file of the package", f)
		}
	}

	up := make(map[string]bool)
	for id, obj := range pkg.TypesInfo.Uses {
		if obj.Pkg() != pkg.Types || (obj.Parent() != nil && obj.Parent() != pkg.Types.Scope()) {
			continue // another package's, or local
		}
		user := filepath.Base(pkg.Fset.Position(id.Pos()).Filename)
		decl := filepath.Base(pkg.Fset.Position(obj.Pos()).Filename)
		ru, okU := rank[user]
		rd, okD := rank[decl]
		if okU && okD && rd < ru {
			up[user+" uses "+types.ObjectString(obj, types.RelativeTo(pkg.Types))+", declared above it in "+decl] = true
		}
	}
	var refs []string
	for r := range up {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		t.Error(r)
	}
}

// readingOrder returns the files doc.go's "Reading order" section lists.
func readingOrder(t *testing.T, pkg *packages.Package) []string {
	t.Helper()
	item := regexp.MustCompile(`^\s+- (\w+\.go): `)
	var doc string
	for _, f := range pkg.Syntax {
		if f.Doc != nil && filepath.Base(pkg.Fset.Position(f.Package).Filename) == "doc.go" {
			doc = f.Doc.Text()
		}
	}
	_, section, ok := strings.Cut(doc, "# Reading order\n")
	if !ok {
		t.Fatal(`doc.go has no "# Reading order" section`)
	}
	section, _, _ = strings.Cut(section, "\n# ")
	var order []string
	for _, line := range strings.Split(section, "\n") {
		if m := item.FindStringSubmatch(line); m != nil {
			order = append(order, m[1])
		}
	}
	if len(order) == 0 {
		t.Fatal(`doc.go's "# Reading order" section lists no file`)
	}
	return order
}
