package main

import (
	"slices"
	"testing"
)

func TestReplaceRun(t *testing.T) {
	args := []string{"--brokers", "b", "--signals-topic", "s", "--cohort-topic", "c", "--grace", "1s"}
	got, err := replaceRun(args, []string{"--signals-topic", "s", "--cohort-topic", "c"}, []string{"--route", "s=c", "--route", "x=y"})
	if want := []string{"--brokers", "b", "--route", "s=c", "--route", "x=y", "--grace", "1s"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("replaceRun = %q, %v; want %q", got, err, want)
	}
	if !slices.Equal(args[2:4], []string{"--signals-topic", "s"}) {
		t.Errorf("replaceRun changed its input: %q", args)
	}
	if _, err := replaceRun(args, []string{"--route", "z=z"}, nil); err == nil {
		t.Error("replaceRun of flags that are not there: no error")
	}
}
