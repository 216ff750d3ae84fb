//go:build race

package kafka

// raceAllocs is the allocations the race detector adds to a slices.Grow
// (the append of a made slice it instruments is not folded into one
// allocation), which TestFetchEncodingAllocations allows.
const raceAllocs = 1
