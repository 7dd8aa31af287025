package topics

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the code's output")

// goldenCase is one block of testdata/commands.golden:
//
//	# comments, kept
//	key: 42
//	in:  {"user_id":42,"op":"leave","extra":1}
//	out: {"op":"leave","user_id":42}
//
// out is AppendCommand of the decoded command; a rejected input has
// "err: <error text>" instead. With -update, out and err lines are rewritten
// and everything else is kept, so a new case needs only key and in.
type goldenCase struct {
	line     int
	comments []string
	key, in  string
}

const goldenCommands = "testdata/commands.golden"

func TestCommandGolden(t *testing.T) {
	data, err := os.ReadFile(goldenCommands)
	if err != nil {
		t.Fatal(err)
	}
	cases, wantOut := parseGolden(t, string(data))
	var out bytes.Buffer
	for i, gc := range cases {
		for _, c := range gc.comments {
			out.WriteString(c + "\n")
		}
		fmt.Fprintf(&out, "key: %s\nin:  %s\n", gc.key, gc.in)
		cmd, err := DecodeCommand([]byte(gc.key), []byte(gc.in))
		var got string
		if err != nil {
			got = "err: " + err.Error()
		} else {
			canonical := AppendCommand(nil, cmd)
			got = "out: " + string(canonical)
			checkCanonical(t, gc, cmd, canonical)
		}
		out.WriteString(got + "\n")
		if i < len(cases)-1 {
			out.WriteString("\n")
		}
		if !*update && got != wantOut[i] {
			t.Errorf("%s:%d: key %s in %s\n got  %s\n want %s", goldenCommands, gc.line, gc.key, gc.in, got, wantOut[i])
		}
	}
	if *update {
		if err := os.WriteFile(goldenCommands, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Errorf("%s is not in canonical form; run go test ./topics -run TestCommandGolden -update", goldenCommands)
	}
}

// checkCanonical checks that the canonical encoding decodes to the same
// command and is a fixed point.
func checkCanonical(t *testing.T, gc goldenCase, cmd Command, canonical []byte) {
	t.Helper()
	again, err := DecodeCommand([]byte(gc.key), canonical)
	if err != nil || again != cmd {
		t.Errorf("%s:%d: canonical %s decodes to %+v, %v; want %+v", goldenCommands, gc.line, canonical, again, err, cmd)
	}
	if re := AppendCommand(nil, again); !bytes.Equal(re, canonical) {
		t.Errorf("%s:%d: canonical form is not a fixed point: %s then %s", goldenCommands, gc.line, canonical, re)
	}
}

// parseGolden splits a golden file into cases and their out/err lines.
func parseGolden(t *testing.T, data string) ([]goldenCase, []string) {
	t.Helper()
	var cases []goldenCase
	var outs []string
	var cur goldenCase
	var comments []string
	for i, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		n := i + 1
		switch {
		case line == "":
			if len(comments) > 0 { // a blank line inside a comment block is kept
				comments = append(comments, line)
			}
		case strings.HasPrefix(line, "#"):
			comments = append(comments, line)
		case strings.HasPrefix(line, "key: "):
			cur = goldenCase{line: n, comments: comments, key: strings.TrimPrefix(line, "key: ")}
			comments = nil
		case strings.HasPrefix(line, "in:  "):
			if cur.line == 0 {
				t.Fatalf("%s:%d: in without key", goldenCommands, n)
			}
			cur.in = strings.TrimPrefix(line, "in:  ")
			cases = append(cases, cur)
			outs = append(outs, "")
			cur = goldenCase{}
		case strings.HasPrefix(line, "out: ") || strings.HasPrefix(line, "err: "):
			if len(outs) == 0 {
				t.Fatalf("%s:%d: result without a case", goldenCommands, n)
			}
			outs[len(outs)-1] = line
		default:
			t.Fatalf("%s:%d: cannot parse %q", goldenCommands, n, line)
		}
	}
	return cases, outs
}
