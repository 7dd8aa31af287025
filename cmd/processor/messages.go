package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// Messages an operator reads when something is wrong: each says what
// happened and what to do, where the error beneath says only the first.

// parseUser parses the --user of a command, saying what is wrong with a
// value that is no canonical decimal user id.
func parseUser(s string) (uint64, error) {
	id, err := topics.ParseUserID([]byte(s))
	if err == nil {
		return id, nil
	}
	var te *topics.Error
	if errors.As(err, &te) {
		switch te.Reason {
		case topics.ReasonKeyEmpty:
			return 0, errors.New("--user: required: want a decimal user id, e.g. --user=42")
		case topics.ReasonKeyLeadingZero:
			// Keys are compared as bytes: 007 and 7 would be two users
			// to Kafka's partitioner, so the processor refuses the first.
			return 0, fmt.Errorf("--user %q: the leading zero is the problem: user ids are written without one (--user=%s)",
				s, strings.TrimLeft(s, "0"))
		}
	}
	return 0, fmt.Errorf("--user %q: want a decimal user id, e.g. --user=42 (%v)", s, err)
}

// storeOpenError explains a membership store that would not open; a lock
// held by another processor is the usual reason.
func storeOpenError(dataDir string, err error) error {
	if errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "lock held by current process") {
		return fmt.Errorf("--data-dir %s is in use by another processor (it holds %s): stop that one, "+
			"or give this one a --data-dir of its own (every instance needs its own): %w",
			dataDir, filepath.Join(dataDir, "membership", "LOCK"), err)
	}
	return fmt.Errorf("unable to open the membership store in --data-dir %s: %w", dataDir, err)
}

// runError adds the way out to what the pipeline reports.
func runError(o *runOptions, err error) error {
	var missing *fanout.MissingTopicsError
	if errors.As(err, &missing) && !o.createTopics {
		return fmt.Errorf("%w: create them, or start with --create-topics=true (%s=true) to let the processor create them", err, envName("create-topics"))
	}
	return err
}
