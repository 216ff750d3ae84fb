package metadata

// Command is a metadata mutation, applied with Store.Apply. The set is
// sealed: the concrete commands are the struct types of this package. They
// are plain values with exported fields only, so a consensus log can
// serialise them in any encoding. Apply also accepts a non-nil pointer to
// any of them.
type Command interface{ isCommand() }

// CreateStream creates a stream named Name at the lowest free stream id.
type CreateStream struct{ Name string }

// DeleteStream deletes a stream with all its topics and partitions.
type DeleteStream struct{ Stream uint32 }

// CreateTopic creates a topic named Name in Stream, at the lowest free topic
// id of that stream, with partitions 0..Partitions-1.
type CreateTopic struct {
	Stream     uint32
	Name       string
	Partitions int
}

// DeleteTopic deletes a topic with all its partitions.
type DeleteTopic struct{ Stream, Topic uint32 }

// CreatePartitions appends Count partitions to a topic, with ids following
// its highest.
type CreatePartitions struct {
	Stream, Topic uint32
	Count         int
}

// DeletePartitions removes the Count highest-numbered partitions of a topic.
// It may remove all of them.
type DeletePartitions struct {
	Stream, Topic uint32
	Count         int
}

// PurgeTopic asks for the messages of every partition of a topic to be
// discarded. The store only records the request (TopicInfo.PurgedRevision)
// and wakes subscribers; the storage layer acts on it.
type PurgeTopic struct{ Stream, Topic uint32 }

func (CreateStream) isCommand()     {}
func (DeleteStream) isCommand()     {}
func (CreateTopic) isCommand()      {}
func (DeleteTopic) isCommand()      {}
func (CreatePartitions) isCommand() {}
func (DeletePartitions) isCommand() {}
func (PurgeTopic) isCommand()       {}
