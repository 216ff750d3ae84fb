//go:build !race

package kafka

const raceAllocs = 0
