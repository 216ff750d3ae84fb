package kafka

import (
	"context"
	"errors"
)

// Operation is what a request does to a resource, in Kafka's ACL terms.
type Operation string

// The operations checked.
const (
	OpRead     Operation = "Read"     // Fetch; a group's join, sync, heartbeat, leave and commits; the topic of an OffsetDelete
	OpWrite    Operation = "Write"    // Produce
	OpCreate   Operation = "Create"   // CreateTopics, auto-creation
	OpDelete   Operation = "Delete"   // DeleteTopics, DeleteRecords; DeleteGroups and OffsetDelete (of the group)
	OpAlter    Operation = "Alter"    // CreatePartitions
	OpDescribe Operation = "Describe" // Metadata, ListOffsets, OffsetFetch, DescribeGroups, ListGroups
)

// ResourceType is the kind of resource an operation acts on.
type ResourceType string

// The resource types checked.
const (
	ResourceTopic ResourceType = "Topic"
	ResourceGroup ResourceType = "Group"
)

// Authorizer decides whether a principal ("User:<name>" after SASL,
// "User:ANONYMOUS" without) may do op to a resource. It is called on
// the request path, concurrently: keep it fast.
type Authorizer interface {
	Authorize(ctx context.Context, principal string, op Operation, resource ResourceType, name string) bool
}

// AuthorizerFunc is an Authorizer from a function.
type AuthorizerFunc func(ctx context.Context, principal string, op Operation, resource ResourceType, name string) bool

// Authorize implements Authorizer.
func (f AuthorizerFunc) Authorize(ctx context.Context, principal string, op Operation, resource ResourceType, name string) bool {
	return f(ctx, principal, op, resource, name)
}

// errTopicDenied is the authorizer's refusal of a topic operation.
var errTopicDenied = errors.New("kafka: topic authorization failed")

type principalKey struct{}

func withPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// allowed asks the authorizer, if there is one, about the request's
// principal.
func (s *Server) allowed(ctx context.Context, op Operation, resource ResourceType, name string) bool {
	if s.cfg.Authorizer == nil {
		return true
	}
	principal, _ := ctx.Value(principalKey{}).(string)
	return s.cfg.Authorizer.Authorize(ctx, principal, op, resource, name)
}
