package metadata

import (
	"cmp"
	"slices"
	"sync"
)

// AnnouncedPartition is a partition that an announced command creates if
// it commits as announced.
type AnnouncedPartition struct {
	// PartitionInfo is the partition as the command would commit it:
	// CreatedRevision is the revision it would get.
	PartitionInfo
	// Config is its topic's configuration.
	Config TopicConfig
}

// announcements are the commands announced and not yet withdrawn.
type announcements struct {
	mu   sync.Mutex
	seq  uint64
	byID map[uint64][]AnnouncedPartition
	// subs is copy-on-write, like Store.subs.
	subs []*subscription
}

// Announce publishes what cmd would create if it were applied now, for
// work that may start before cmd commits: the reconciler builds the
// partition files of a topic while the command that creates it is being
// made durable (the metadata log's fsync, a raft round), and adopts them
// once the commit lands with the announced incarnation. Only CreateTopic
// and CreatePartitions create partitions; for any other command, and for
// one that would fail now, nothing is announced and no one is woken.
//
// An announcement is a forecast, not a promise: the command may fail to
// become durable, or commit behind another command and get other ids or
// another revision. Whoever acts on it must check the committed metadata
// before using what it built, and remove what the commit did not confirm.
//
// The caller calls withdraw once the command has been applied or has
// failed (it is idempotent). Withdrawing wakes the announcement
// subscribers only if some announced partition is not committed with the
// announced incarnation, so that what was built for it is removed
// promptly; a command that committed as announced wakes only the commit
// subscribers, through Apply.
func (s *Store) Announce(cmd Command) (withdraw func()) {
	_, withdraw = s.announce(cmd)
	return withdraw
}

// announce is Announce, and returns what it announced too.
func (s *Store) announce(cmd Command) ([]AnnouncedPartition, func()) {
	cmd, ok := deref(cmd)
	if !ok {
		return nil, func() {}
	}
	var parts []PartitionInfo
	var cfg TopicConfig
	s.mu.RLock()
	switch c := cmd.(type) {
	case CreateTopic:
		if _, _, tc, p, err := s.planTopic(c); err == nil {
			parts, cfg = p, tc
		}
	case CreatePartitions:
		if _, t, p, err := s.planPartitions(c); err == nil {
			parts, cfg = p, t.config
		}
	}
	s.mu.RUnlock()
	if len(parts) == 0 {
		return nil, func() {}
	}
	ann := make([]AnnouncedPartition, len(parts))
	for i, p := range parts {
		ann[i] = AnnouncedPartition{PartitionInfo: p, Config: cfg}
	}
	a := &s.ann
	a.mu.Lock()
	if a.byID == nil {
		a.byID = make(map[uint64][]AnnouncedPartition)
	}
	a.seq++
	id := a.seq
	a.byID[id] = ann
	subs := a.subs
	a.mu.Unlock()
	wake(subs)
	var once sync.Once
	return ann, func() {
		once.Do(func() {
			a.mu.Lock()
			delete(a.byID, id)
			subs := a.subs
			a.mu.Unlock()
			for _, p := range ann {
				if rev, ok := s.CreatedRevision(p.NS); !ok || rev != p.CreatedRevision {
					wake(subs)
					return
				}
			}
		})
	}
}

// Announced returns the partitions of every announced command not yet
// withdrawn, sorted by namespace, then by announced revision.
func (s *Store) Announced() []AnnouncedPartition {
	a := &s.ann
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.byID) == 0 {
		return nil
	}
	var out []AnnouncedPartition
	for _, ann := range a.byID {
		out = append(out, ann...)
	}
	slices.SortFunc(out, func(x, y AnnouncedPartition) int {
		return cmp.Or(cmp.Compare(x.NS, y.NS), cmp.Compare(x.CreatedRevision, y.CreatedRevision))
	})
	return out
}

// SubscribeAnnouncements is Subscribe for announcements: the channel
// receives a value (coalescing, never blocking the sender) after every
// Announce that announced partitions, and after every withdrawal of an
// announcement that did not commit as announced.
func (s *Store) SubscribeAnnouncements() (wake <-chan struct{}, cancel func()) {
	return subscribe(&s.ann.mu, &s.ann.subs)
}

// wake sends each live subscriber a value unless one is pending.
func wake(subs []*subscription) {
	for _, sub := range subs {
		if sub.cancelled.Load() {
			continue
		}
		select {
		case sub.ch <- struct{}{}:
		default: // a wake is already pending: coalesce
		}
	}
}
