package metadata

// GroupCounts is one consumer group's size and activity, for metrics.
// Expiries and Commits count what this store applied since it loaded the
// group: they are not replicated state (a snapshot carries neither, and
// Export leaves them out), so two members of the metadata group agree on
// them only while both applied the same commands.
type GroupCounts struct {
	// Stream, Topic and Group are names: the ids of a deleted stream or
	// topic are reused, names are what a user knows a group by.
	Stream, Topic, Group string
	// CreatedRevision is the group's creation revision: never reused.
	CreatedRevision uint64
	Members         int
	Generation      uint64
	Expiries        uint64 // members removed because their session lapsed
	Commits         uint64 // offset commits applied
}

// GroupCounts returns every consumer group's counts, under one read lock
// and without ordering members (a scrape's cost is one step per group).
// Groups come in no particular order.
func (s *Store) GroupCounts() []GroupCounts {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []GroupCounts
	s.streams.Ascend(func(st *stream) bool {
		st.topics.Ascend(func(t *topic) bool {
			for _, g := range t.groups {
				out = append(out, GroupCounts{
					Stream: st.name, Topic: t.name, Group: g.name, CreatedRevision: g.createdRev,
					Members: len(g.members), Generation: g.generation,
					Expiries: g.expiries, Commits: g.commits,
				})
			}
			return true
		})
		return true
	})
	return out
}
