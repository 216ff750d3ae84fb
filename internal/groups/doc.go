// Package groups is the home of the mechanisms every raft group of a
// node needs, whoever hosts it: the shards host the partition groups and
// host the metadata group, and each mechanism is written once, here,
// rather than once per host.
//
// It sits below shard and host and imports only internal/replica (one
// raft group), the internal leaves it builds on (raftid, backoff) and the
// public seams: no metadata or partition types, so
// a group's application stays the host's business. It starts no
// goroutine: the owner of a group drives every call on its own
// goroutine, as it drives the replica.Group itself.
//
// Both the partition groups and the metadata group are driven through
// it: a peer's message is stepped by Step and a group's Ready handled by
// Process, in one order (validation and the term bound, persist then
// send then apply, are replica.Group's; around them a quiesce heartbeat
// taken or stepped, a refusal counted under its reason, a failure
// reported, and leader reads asked again and confirmed after the Ready),
// each host its Member. Both keep their quiescence in an Awake, the set
// of groups a host ticks with each one's quiescence clock (a shard's
// holds its partition groups, ticked in turns; the metadata member's its
// one group), quiesced by Awake.Quiesce and StepQuiesce, and a follower
// that stays quiesced hibernates through it (Awake.Sleep and
// Awake.Hibernate: replica.Group.Hibernate drops its raft node until
// something needs it). Both use its
// leader reads (Reads), node liveness's verdicts and the campaign after a
// leader's death (Down, PeerLive, CampaignerOf, and Elections, which
// starts it), the compaction trigger (Compaction) and the configuration
// changes (NextChange, CaughtUp: a newcomer joins as a learner and is
// promoted once whole — a partition's new replica, and a node added to
// the metadata group; Propose and ChangePace: each step proposed, and
// given ChangeRetryTicks to show). The partition groups also use the
// bound on elections under way at once
// (Elections with quiescence: the others queued or held unticked; the
// metadata member, one group, schedules its elections without the bound
// and stands at once, Elections.Stand). A
// failed group is reopened by its owner (the reconciler rebuilds a
// partition, the metadata member reopens itself), both paced by Reopen
// (the one backoff, internal/backoff). Nothing here reads a clock: a
// time, where one matters (Reopen), is passed in.
package groups
