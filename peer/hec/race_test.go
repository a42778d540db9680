//go:build race

package hec

// raceEnabled: the race detector's shadow memory makes RSS no measure of
// what the code allocates; the memory tests then bound the Go heap only.
const raceEnabled = true
