//go:build !race

package topics

const raceEnabled = false
