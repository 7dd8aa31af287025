package cmdline

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"testing"
)

func TestList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"a", []string{"a"}},
		{"a, b,,c ", []string{"a", "b", "c"}},
		{"127.0.0.1:9092,127.0.0.1:9093", []string{"127.0.0.1:9092", "127.0.0.1:9093"}},
	} {
		if got := List(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantCode   int
		wantStderr string
	}{
		{"success", nil, 0, ""},
		{"help", flag.ErrHelp, 0, ""},
		{"help wrapped", fmt.Errorf("parsing: %w", flag.ErrHelp), 0, ""},
		{"an error", errors.New("no brokers"), 2, "cmd: no brokers\n"},
		{"failed, said already", &Failed{Code: 1}, 1, ""},
		{"failed, wrapped", fmt.Errorf("run: %w", &Failed{Code: 3}), 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotArgs []string
			run := func(_ context.Context, args []string, _, _ io.Writer) error {
				gotArgs = args
				return tc.err
			}
			var stderr bytes.Buffer
			code := exit("cmd", 2, run, []string{"-x", "y"}, io.Discard, &stderr)
			if code != tc.wantCode || stderr.String() != tc.wantStderr {
				t.Errorf("exit = %d, stderr %q; want %d, %q", code, stderr.String(), tc.wantCode, tc.wantStderr)
			}
			if !slices.Equal(gotArgs, []string{"-x", "y"}) {
				t.Errorf("run got args %q", gotArgs)
			}
		})
	}
}
