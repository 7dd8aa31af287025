// Package cmdline is what cohortgate's commands (processor, loadgen,
// chaos, bench) share about being a command: how main runs one, and how a
// flag holding a comma-separated list reads. It holds nothing else; what
// only looks alike between the commands stays in each.
package cmdline
