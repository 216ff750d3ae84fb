package parkway

import "github.com/parkway-io/parkway/shard"

// oneProduce is the request of a single-message produce with its copy of
// the message: one allocation where a batch needs two, on the path every
// Produce of one message takes. The request refers to the message, so
// they live as long as each other.
type oneProduce struct {
	req shard.Request
	msg [1]Message
}
