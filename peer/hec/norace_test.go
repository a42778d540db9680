//go:build !race

package hec

const raceEnabled = false
