package main

import (
	"errors"
	"flag"
	"go/parser"
	"go/token"
	"io"
	"regexp"
	"strings"
	"testing"
)

// TestPackageDocListsEveryCommand keeps the package comment's Usage, the
// usage text and dispatch naming the same commands: a command added to
// one and not to the others fails here.
func TestPackageDocListsEveryCommand(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	command := regexp.MustCompile(`(?m)^(?:usage:)?\s*bench (\w+) \[flags\]`)
	names := func(text string) []string {
		var out []string
		for _, m := range command.FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		return out
	}
	doc, use := names(f.Doc.Text()), names(usage)
	if len(use) == 0 || strings.Join(doc, " ") != strings.Join(use, " ") {
		t.Fatalf("package comment lists %v, usage lists %v: want the same commands", doc, use)
	}
	for _, name := range use {
		// Every command answers -h with its flags, and nothing else is
		// taken for one.
		if err := dispatch(t.Context(), []string{name, "-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("bench %s -h: %v, want flag.ErrHelp (is it in dispatch?)", name, err)
		}
	}
	if err := dispatch(t.Context(), []string{"no-such-command"}, io.Discard, io.Discard); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Errorf("bench no-such-command: %v, want an error", err)
	}
}
