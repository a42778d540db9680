//go:build race

package query

// raceEnabled scales the generated suites down under the race detector.
const raceEnabled = true
