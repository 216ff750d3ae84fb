//go:build !race

package parkway_test

const raceEnabled = false
