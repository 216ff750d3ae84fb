package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
)

// FaultRates are the probabilities of the injected faults. Zero disables a
// fault.
type FaultRates struct {
	// InboxBurst is the chance, per scheduler step, that 4–10 clients
	// (idle ones, then up to 8 extra) send a request to one partition at
	// once, against shard inboxes of Config.InboxSize frames: sends and
	// forwards are refused with router.ErrFull.
	InboxBurst float64
	// DiskFull is the chance, per scheduler step, that the data disk
	// starts failing writes, file creation and directory creation with
	// ENOSPC for 50 ms – 2 s of virtual time.
	DiskFull float64
	// DiskError is the chance, per scheduler step, of arming a one-shot
	// EIO: one of the next few fsyncs fails, or one of the next few
	// writes is torn (part of it reaches the file, then EIO).
	DiskError float64
	// SlowBuild is the chance, per partition build, that the build takes
	// 5–40 further scheduler steps, during which the reconciler's pass is
	// blocked in Build and everything else goes on.
	SlowBuild float64
	// Crash is the chance, per scheduler step, that the node crashes and
	// is rebuilt from its disk; requests in flight are answered by the
	// crash. Two crashes in three are a power loss (everything not
	// fsynced is lost: MemFS.Crash), one in three a process crash (the
	// page cache survives: whatever was written is still there).
	Crash float64
	// QuiescedCrash, in cluster mode, is the chance per scheduler step
	// that a node leading quiesced partition groups (when one does)
	// crashes and stays down for 1–3 s, longer than the liveness timeout:
	// the survivors learn of the death from node liveness only, and must
	// elect new leaders for those groups, which send nothing while
	// quiesced.
	QuiescedCrash float64
	// Join, in cluster mode, is the chance per scheduler step that a new
	// node starts (Cluster.Join, an empty disk) and is added to the
	// cluster through a running member (the engine's AddNode steps,
	// Engine.StartAddNode): one addition at a time, at most two
	// per run, and never past seven nodes.
	Join float64
	// Lie is the chance per scheduler step of a lying disk fault
	// (lie.go): a bit flipped, a file cut short or rolled back to an
	// earlier synced copy while the node is down (a power loss brings it
	// down), or, while it runs, a write misdirected, a bad sector or a
	// bit flipped on read. In cluster mode every lie hits one node, a
	// founder the seed picks (clie.go).
	Lie float64
	// LieKinds, when not 0, limits Lie to the kinds it names (LieKind
	// bits).
	LieKinds LieKind
	// LiePartitionsOnly limits Lie to the files of the partitions'
	// directories (segments, indexes, consumer offsets, incarnation
	// files; a partition's raft log in a cluster): the journal and the
	// other files outside them are spared.
	LiePartitionsOnly bool
	// LiesDisarmed makes every lie a dud: each is drawn, armed and fired
	// as Lie would have it — the same random draws, the crash of a lie
	// made while the node is down included — but the disk is left as it
	// is. The run is the same as with the lies armed up to the first
	// lie that would have changed something: the control that shows a
	// violation follows from the lies (TestBehaviour28 catch tests).
	LiesDisarmed bool
	// WrongDisk, in cluster mode, is the chance per restart of a crashed
	// node that it is first started on a copy of another node's data
	// directory (as an operator who swapped disks would): the start must
	// be refused with host.ErrWrongDataDir (DESIGN behaviour 27), after
	// which the node starts on its own disk.
	WrongDisk float64
	// Remove, in cluster mode, is the chance per scheduler step that a
	// member of a cluster of four or more starts being removed as
	// Engine.RemoveNode removes one (cremove.go, Engine.StartRemoveNode):
	// DrainNode moves its replicas to the other nodes, the call waits for
	// the moves to settle, then the metadata group's membership change
	// carrying RemoveNode takes it out; the removed
	// node is closed. One membership change at a time.
	Remove float64

	// Net are the network faults of cluster mode (Config.Nodes > 1).
	Net NetFaultRates
	// Peer are the faults of a member that misbehaves within the
	// protocol (cluster mode, cpeer.go).
	Peer PeerFaultRates
	// Clock are the faults of the nodes' clocks (both modes).
	Clock ClockFaultRates
	// SpareMetadataLog, in cluster mode, keeps DiskFull and DiskError
	// away from the metadata group's raft log. The default cluster faults
	// reach it: a metadata member whose raft log refuses a write goes down
	// and is reopened from that log by its engine.
	SpareMetadataLog bool
}

// NetFaultRates are the network faults of cluster mode. Each is the
// chance, per scheduler step, that the fault starts (when it is not
// already on); every fault ends after a random stretch of virtual time.
type NetFaultRates struct {
	// Drop starts a lossy spell: 5–40 % of node-to-node messages are lost
	// for 50 ms – 1 s.
	Drop float64
	// Duplicate starts a spell in which 5–30 % of messages are delivered
	// twice.
	Duplicate float64
	// Reorder starts a spell in which 10–50 % of messages are held back
	// and delivered after the next one on their link.
	Reorder float64
	// Delay starts a spell in which every message is held 1–40 ms.
	Delay float64
	// Partition splits the nodes into two sides (a minority and a
	// majority, chosen at random) that cannot reach each other for
	// 100 ms – 3 s, then heals.
	Partition float64
	// OneWay starts a one-way partition for 100 ms – 3 s: messages go
	// one way between two groups of nodes and are lost the other way —
	// a node that can send but not hear (deaf), one heard but unable to
	// send (mute), or two sides of which one reaches the other.
	OneWay float64
	// Clog clogs one direction of one link, or every link into or out of
	// one node, for 20 ms – 1 s: their messages are held, in order, and
	// delivered when the clog ends (a stalled direction, not a broken
	// one).
	Clog float64
	// Stop stops one node for 100 ms – 3 s: it is cut off from every
	// other node and does no work at all (a paused process); clients do
	// not start requests on it, and those it holds wait for it to resume.
	Stop float64
}

// PeerFaultRates are the faults of a member that misbehaves within the
// protocol: authenticated, its messages well formed, what they say
// false or too much (cluster mode, cpeer.go). Each is the chance, per
// scheduler step, that one member picked at random starts the spell,
// when it is not already on; the spell lasts 100 ms – 2 s.
type PeerFaultRates struct {
	// Terms makes the member send, besides each of its heartbeats,
	// heartbeat and append answers, votes and pre-votes (partition
	// groups and the metadata group), now and then a copy with a forged
	// term: an extreme one (2^62, 2^62−1, 2^62+1, 2^64−1), which the
	// bound relative to the receiver's term must refuse, or a jump ahead
	// of the real term by up to 2^28, which raft adopts (a run forges
	// jumps of 2^31 in all at most: see cpeer.go).
	Terms float64
	// Flood makes the member send bursts of forwarded produce requests
	// (16–64 KiB each, for a partition its metadata knows, under an
	// incarnation that never exists) and probes for them to one peer at
	// a time: the peer holds them until it answered them, within its
	// forwarded-request budgets (host.Cluster.MaxForwardedPeerBytes,
	// MaxForwardedBytes, small in the simulator), and answers the rest
	// at once.
	Flood float64
	// Stall makes the member open frames to its peers that claim a large
	// size (a quarter of the largest frame to all of it) and never end:
	// half stop after their header, half dribble their payload and stop
	// short of the last byte. Every node runs its inbound traffic
	// through the transport's inbound budget (internal/inbound), which
	// charges each claim to the connection, the member's share and the
	// total before any byte of payload, and closes a connection whose
	// frame misses its stall or frame deadline (short in the simulator).
	Stall float64
	// SlowLink makes one direction of one link between two members slow
	// for the spell (a congested path, or a member that stops inside a
	// frame on its one connection): each frame read off the sender's
	// regular connection to the receiver arrives in dribbles, each
	// 64 KiB of it up to 1.25× the receiver's stall timeout after the
	// last, or stops for good (one in eight), and every later frame of
	// that sender to that receiver waits behind it, as on a TCP byte
	// stream, until it is whole or the receiver's read deadline closes
	// the connection, losing the frames behind it; the sender's next
	// frame opens a new connection (cslow.go). DefaultSlowLink in the
	// default cluster faults.
	SlowLink float64
	// ConnFlood floods one node's listener with connections for the
	// spell, from an outsider (one address, handshakes that never
	// finish) or a member (handshakes that never finish, and others
	// that do, redialling in a loop), while the other members redial it
	// now and then. Every node admits, times and closes its connections
	// by the transport's connection slots (internal/slots); the honest
	// redials must be admitted (cconns.go). DefaultConnFlood in the
	// default cluster faults.
	ConnFlood float64
}

// ClockFaultRates are the faults of the nodes' own clocks. Each node
// reads its own clock through the engine's clock seam: a monotonic clock
// its timers run on (raft ticks, liveness, timeouts, reconcile periods)
// and a wall offset added to what Now returns (append times, consumer
// group session clocks, deadlines). When any rate is set, every node's
// wall clock starts off the virtual clock by up to ±1 s (skew). Each rate
// is the chance, per scheduler step, that the fault starts on one node
// picked at random.
type ClockFaultRates struct {
	// Jump sets the node's wall clock forward or back by 1 ms – 10 s, for
	// good (timers armed before keep their due time, as a Go timer does
	// when the wall clock is stepped).
	Jump float64
	// Strobe makes the node's wall clock flip between two values up to
	// ±2 s apart every 1–20 ms, for 100 ms – 2 s.
	Strobe float64
	// Drift runs the node's whole clock, timers included, at 0.5–2 times
	// the virtual clock's rate for 100 ms – 3 s.
	Drift float64
}

// DefaultFaults are the fault rates of the default seeds: each kind fires
// a few times in a few dozen runs without drowning the workload.
func DefaultFaults() FaultRates {
	return FaultRates{
		InboxBurst: 0.004,
		DiskFull:   0.0015,
		DiskError:  0.002,
		SlowBuild:  0.12,
		Crash:      0.0004,
		Clock:      ClockFaultRates{Jump: 0.003, Strobe: 0.002, Drift: 0.003},
		Lie:        DefaultLie,
	}
}

// Config configures one run. Zero fields take defaults, except Faults:
// its zero value injects nothing (DefaultConfig sets DefaultFaults).
type Config struct {
	// Seed determines the whole run.
	Seed uint64
	// Nodes is the number of nodes. 0 or 1 simulates one node (no
	// replication); more simulates a cluster (see the package
	// documentation): every partition and the metadata are raft groups
	// over an in-memory bus.
	Nodes int
	// Shards is each node's shard count; 0 picks 1–3 from the seed (1–2
	// in cluster mode).
	Shards int
	// Steps is the number of scheduler steps before quiescence (default
	// 2,000; 12,000 in cluster mode, where most steps move raft traffic).
	Steps int
	// TickInterval is the raft tick of cluster mode (default
	// shard.DefaultTickInterval).
	TickInterval time.Duration
	// Clients is the number of concurrent clients (default 6).
	Clients int
	// GroupMembers is the number of consumer group members in cluster
	// mode: clients homed on the nodes in turn that share a consumer
	// group as parkway.Consumer members do, each under a commit policy
	// drawn from the seed (cmembers.go, invariants 9 and 12). 0 has
	// none; DefaultClusterConfig gives every third seed three.
	GroupMembers int
	// MemberPartitions, when not 0, gives the members a topic of their
	// own with that many partitions (stream "storm", topic "t", created
	// by the first member that finds none), instead of the first topic
	// their home knows: with many members, every member joins at once —
	// a join storm (TestClusterGroupJoinStorm).
	MemberPartitions int
	// StormFor, with MemberPartitions, sizes a join storm's run in
	// virtual time rather than steps: after Steps steps the scheduler
	// goes on until the storm has settled and a member delivered after
	// it, or until StormFor has passed since the first join. A storm's
	// virtual time per step shrinks with its members (each step acts for
	// one in eight of them), so a fixed step budget that covers seconds
	// for 24 members covers about 150 ms for 1,000, too short to settle.
	StormFor time.Duration
	// InboxSize is each shard's inbox bound. The default is 4 frames —
	// small, so bursts fill it — when Faults.InboxBurst is set, and the
	// production default (shard.DefaultInboxSize) otherwise.
	InboxSize int
	// Faults are the fault probabilities.
	Faults FaultRates
	// Trace, when set, receives every trace event, one per line.
	Trace io.Writer
}

// DefaultConfig is the configuration of the default seeds.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Faults: DefaultFaults()}
}

// DefaultLie is the lying-disk rate of the default single-node faults:
// about four lies in a run of the default length.
const DefaultLie = 0.002

// DefaultClusterFaults are the fault rates of the default cluster seeds.
func DefaultClusterFaults() FaultRates {
	return FaultRates{
		DiskFull:      0.0008,
		DiskError:     0.001,
		SlowBuild:     0.08,
		Crash:         0.0002,
		QuiescedCrash: 0.0002,
		Join:          0.0001,
		Remove:        0.0002,
		WrongDisk:     0.25,
		Clock:         ClockFaultRates{Jump: 0.0005, Strobe: 0.0003, Drift: 0.0005},
		Net: NetFaultRates{
			Drop:      0.0015,
			Duplicate: 0.0015,
			Reorder:   0.0015,
			Delay:     0.0015,
			Partition: 0.0006,
			OneWay:    0.0004,
			Clog:      0.0008,
			Stop:      0.0004,
		},
		Peer: PeerFaultRates{Terms: 0.0004, Flood: 0.0004, Stall: 0.0002, SlowLink: DefaultSlowLink, ConnFlood: DefaultConnFlood},
		Lie:  ClusterLie,
	}
}

// DefaultClusterConfig is the configuration of the default cluster seeds:
// three nodes, or five for one seed in four (where the default
// replication factor, three, leaves every partition off two nodes),
// DefaultClusterFaults, and three consumer group members on one seed in
// three.
func DefaultClusterConfig(seed uint64) Config {
	nodes := 3
	if seed%4 == 3 {
		nodes = 5
	}
	cfg := Config{Seed: seed, Nodes: nodes, Faults: DefaultClusterFaults()}
	if seed%memberSeedEvery == 1 {
		cfg.GroupMembers = defaultGroupMembers
	}
	return cfg
}

// Group members in the default cluster seeds: defaultGroupMembers on
// every memberSeedEvery-th seed (those of seed%memberSeedEvery == 1,
// three- and five-node ones alike). Members on every seed cost a
// quarter more CPU per sweep; on a third, under a tenth.
const (
	memberSeedEvery     = 3
	defaultGroupMembers = 3
)

const (
	defaultSteps        = 2000
	defaultClusterSteps = 12000
	defaultClients      = 6
	smallInboxSize      = 4
	// clusterInboxSize is the shard inbox of cluster mode: raft traffic
	// shares the inbox with client frames, so the burst-sized inbox of
	// single-node mode would drop most heartbeats.
	clusterInboxSize = 256
)

func (c Config) cluster() bool { return c.Nodes > 1 }

func (c Config) withDefaults() Config {
	if c.Steps == 0 {
		c.Steps = defaultSteps
		if c.cluster() {
			c.Steps = defaultClusterSteps
		}
	}
	if c.TickInterval == 0 {
		c.TickInterval = shard.DefaultTickInterval
	}
	if c.Clients == 0 {
		c.Clients = defaultClients
	}
	if c.InboxSize == 0 {
		c.InboxSize = shard.DefaultInboxSize
		switch {
		case c.cluster():
			c.InboxSize = clusterInboxSize
		case c.Faults.InboxBurst > 0:
			c.InboxSize = smallInboxSize
		}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Nodes < 0 || c.Shards < 0 || c.Steps < 0 || c.Clients < 0 || c.InboxSize < 0 || c.TickInterval < 0 {
		errs = append(errs, errors.New("sim: negative Nodes, Shards, Steps, Clients, InboxSize or TickInterval"))
	}
	if c.Nodes > maxNodes {
		errs = append(errs, fmt.Errorf("sim: %d nodes, at most %d", c.Nodes, maxNodes))
	}
	f := c.Faults
	n := f.Net
	if !c.cluster() && n != (NetFaultRates{}) {
		errs = append(errs, errors.New("sim: network faults need Nodes > 1"))
	}
	if c.cluster() && f.InboxBurst > 0 {
		errs = append(errs, errors.New("sim: InboxBurst is a single-node fault"))
	}
	if !c.cluster() && (f.QuiescedCrash > 0 || f.Join > 0 || f.Remove > 0 || f.WrongDisk > 0 || f.Peer != (PeerFaultRates{})) {
		errs = append(errs, errors.New("sim: QuiescedCrash, Join, Remove, WrongDisk and Peer need Nodes > 1"))
	}
	if !c.cluster() && (c.GroupMembers > 0 || c.MemberPartitions > 0) {
		errs = append(errs, errors.New("sim: GroupMembers and MemberPartitions need Nodes > 1"))
	}
	for _, p := range []float64{f.InboxBurst, f.DiskFull, f.DiskError, f.SlowBuild, f.Crash, f.QuiescedCrash, f.Join, f.Remove, f.Lie, f.WrongDisk,
		n.Drop, n.Duplicate, n.Reorder, n.Delay, n.Partition, n.OneWay, n.Clog, n.Stop,
		f.Peer.Terms, f.Peer.Flood, f.Peer.Stall, f.Peer.SlowLink, f.Peer.ConnFlood, f.Clock.Jump, f.Clock.Strobe, f.Clock.Drift} {
		if p < 0 || p > 1 {
			errs = append(errs, fmt.Errorf("sim: fault probability %v outside [0, 1]", p))
		}
	}
	return errors.Join(errs...)
}

// FaultCounts counts the faults that fired, that is, took effect: a
// refusal by a full inbox, a filesystem operation failed with ENOSPC or
// EIO (a torn write counts as EIO), a build that was slowed, a crash.
type FaultCounts struct {
	InboxFull    int
	DiskFull     int
	DiskError    int
	SlowBuild    int
	Crash        int // power losses
	ProcessCrash int
	// QuiescedCrash counts the crashes (of either kind, counted above
	// too) of a node that led quiesced partition groups; CalmCrashes
	// those of them after which every other fault stopped until the
	// failover was checked, and Failovers the groups then found led by
	// a survivor (cfailover.go).
	QuiescedCrash int
	CalmCrashes   int
	Failovers     int
	// Joins counts the nodes that started joining, Joined the additions
	// a member applied.
	Joins  int
	Joined int
	// Removes counts the removals that began, Removed those that
	// completed (the node closed), RemovesRefused the drains the metadata
	// refused (metadata.ErrNotEnoughNodes: a topic's replication factor
	// needs the node); MovesSettled the replicas that left a partition's
	// group (SettleReplicas applied), by drains and rebalances.
	Removes        int
	Removed        int
	RemovesRefused int
	MovesSettled   int
	// MemberCuts counts the partitions that cut a group member's node off
	// with its poll in flight (Config.GroupMembers), counted in
	// Partitions too.
	MemberCuts int

	// Cluster mode: messages the network dropped, duplicated, delivered
	// out of order, delayed, or lost to a cut link (partition or stopped
	// node), from transport.Network's counters; and the partitions and node
	// stops that began.
	MsgDropped    int
	MsgDuplicated int
	MsgReordered  int
	MsgDelayed    int
	MsgCut        int
	Partitions    int
	Stops         int
	// OneWays counts the one-way partitions that began, Clogs the clogs;
	// MsgClogged the messages a clog held (and delivered when it ended).
	OneWays    int
	Clogs      int
	MsgClogged int
	// DeafCalms counts the calms after a node leading quiesced groups
	// went deaf (a one-way partition), whose failovers are checked like
	// a crashed leader's (counted in Failovers).
	DeafCalms int
	// ClockJumps, ClockStrobes and ClockDrifts count the clock faults
	// that began (both modes).
	ClockJumps   int
	ClockStrobes int
	ClockDrifts  int
	// FailedPasses counts reconciler passes that returned an error (a
	// replicated partition whose raft log a faulty disk refused).
	FailedPasses int
	// MetaReopens counts metadata members reopened from their raft log
	// after it refused a write (a recovery, not a fault).
	MetaReopens int
	// Lies counts the lying disk faults that took effect, by kind
	// (single-node mode, lie.go); Detected the reads and builds of
	// touched incarnations answered with damage.
	Lies     LieCounts
	Detected int
	// LieWriteErrors counts the misdirected writes (Lies) aimed before
	// the start of their file: errorfs answers them as a failed write,
	// an injected I/O error like DiskError's.
	LieWriteErrors int
	// WrongDisks counts the starts on another node's data directory
	// (cluster mode), each refused.
	WrongDisks int
	// A misbehaving member (cluster mode, cpeer.go). TermSpells counts
	// the spells of forged terms that began; ForgedTerms the forged
	// copies sent (ForgedExtreme of them with an extreme term); TermsRefused
	// the raft messages the receivers refused as out of reach of their
	// term or invalid (parkway_frame_drops_total, reasons
	// raft_out_of_reach and invalid_raft_message). FloodSpells counts the
	// spells of forwarded-request floods, FloodRequests the requests and
	// FloodProbes the probes sent, FloodRefused the requests answered at
	// once over a budget (host.ForwardStats.Refused), FloodPeakBytes the
	// most bytes of forwarded requests one node held. StallSpells counts
	// the spells of stalled frames, StalledFrames the frames opened
	// (StallRefused of them refused over a budget at their header),
	// StallTimeouts those closed at a read deadline, StallerRefused the
	// stalling member's own frames refused while its share was full,
	// StallPeakBytes the most inbound bytes one node's budget held.
	// SlowLinkSpells counts the spells of a slow link, SlowFrames the
	// frames read slowly on one, SlowWhole those that arrived whole,
	// SlowTimeouts those whose connection a read deadline closed,
	// SlowQueued the frames that waited behind a slow one, SlowLost
	// those lost behind a closed connection (the slow frame not
	// counted).
	TermSpells     int
	ForgedTerms    int
	ForgedExtreme  int
	TermsRefused   int
	FloodSpells    int
	FloodRequests  int
	FloodProbes    int
	FloodRefused   int
	FloodPeakBytes int
	StallSpells    int
	StalledFrames  int
	StallRefused   int
	StallTimeouts  int
	StallerRefused int
	StallPeakBytes int
	SlowLinkSpells int
	SlowFrames     int
	SlowWhole      int
	SlowTimeouts   int
	SlowQueued     int
	SlowLost       int
	// ConnFloodSpells counts the connection floods that began (cconns.go),
	// FloodConns the connections the flooders opened, FloodConnsRefused
	// those refused at accept, HandshakeTimeouts those closed at their
	// handshake deadline, ConnsEvicted the members' connections closed
	// past MaxPeerConns, HonestRedials the other members' redials (each
	// admitted).
	ConnFloodSpells   int
	FloodConns        int
	FloodConnsRefused int
	HandshakeTimeouts int
	ConnsEvicted      int
	HonestRedials     int
}

// OpCounts counts client operations by kind and by outcome.
type OpCounts struct {
	Metadata     int // metadata commands committed
	Produce      int // single-message produces
	ProduceBatch int // batch produces
	Poll         int
	StoreOffset  int
	GetOffset    int
	Attempts     int // requests sent (every try of every operation)
	Retries      int // tries after a "retry here" answer
	Acked        int // produces acknowledged
	Unknown      int // operations whose outcome is unknown (crash, I/O error)
	Linearized   int // partition incarnations whose history porcupine checked
	Unchecked    int // histories porcupine could not decide within its timeout

	// Cluster mode.
	Redirects      int // "not leader" answers whose hint a client followed
	NotLeader      int // "not leader" answers
	UnknownAnswers int // ErrOutcomeUnknown answers (a write retried after one keeps its producer sequence)
	MetaRetries    int // metadata proposals made again after a lost leader or a timeout
	StaleReads     int // polls served by a replica missing an acknowledged message (Local polls)
	MetaElections  int // metadata leader changes seen, summed over the nodes
	// Placement and leader balance.
	NotHeld         int // "not leader" answers from a node holding no replica of the partition
	LeaderTransfers int // leadership transfers a shard started (parkway_leader_transfers_total)
	// Membership.
	JoinRetries   int // node additions proposed again after the forward timeout
	RemoveRetries int // removals proposed again after the forward timeout
	JoinCalls     int // AddNode calls that failed and were made again
	RemoveCalls   int // RemoveNode calls that failed and were made again
	Rebalances    int // metadata.Rebalance commands the workload issued
	// Group members (Config.GroupMembers).
	MemberDelivered int // messages members handed their applications
	MemberFenced    int // poll answers with messages a member's fence refused
	MemberRevokes   int // revocations members ran (their Consumer released partitions moving away)
	MemberJoins     int // joins of members committed
	MemberLeases    int // lease renewals members sent (heartbeats that are no log entry)
	MemberExpired   int // expiries of lapsed members the metadata leader committed (ExpireMembers that removed some)
	// Read barriers (invariant 11).
	Barriers       int // metadata read barriers started
	BarriersFailed int // those given up (no leader answered by the deadline, the member down or failed)
}

// Result describes a run.
type Result struct {
	Seed   uint64
	Nodes  int
	Shards int
	// TraceHash is the FNV-64a hash of the event trace: equal for two runs
	// of one seed (and one Config).
	TraceHash uint64
	// Events is the trace's length.
	Events int64
	// VirtualTime is how far the manual clock moved.
	VirtualTime time.Duration
	Faults      FaultCounts
	Ops         OpCounts
	// StormSettled, with Config.MemberPartitions (a join storm), is how
	// long after the first member joined the group first settled: every
	// member in it, every partition held and none moving (0: it never
	// did). StormSettledDelivered is how many messages members had
	// handed to their applications by then, StormDelivered how many
	// from then to the end of the run.
	StormSettled          time.Duration
	StormSettledDelivered int
	StormDelivered        int
}

// invariantName is the registered name of invariant id (the registry,
// invariant.go, is the one list: a table of its own here lacked
// invariants 10 and 11, and a violation of 11 panicked in Error, cluster
// seed 20529).
func invariantName(id int) string {
	for _, inv := range invariants {
		if inv.id == id {
			return inv.name
		}
	}
	return "unregistered invariant"
}

// Violation is a failed run: the first invariant found violated.
type Violation struct {
	Seed uint64
	// Cluster is set for a cluster-mode run (Config.Nodes > 1).
	Cluster bool
	// Invariant is 1–12 (see the package documentation); 0 reports the
	// simulator losing track of the engine (a desynchronised inbox mirror,
	// an engine call failing), which is a bug too.
	Invariant int
	Detail    string
	// Event is the trace position at which it was found.
	Event int64
	// Tail holds the last trace events before it.
	Tail []string
	// Known, when set, names a known engine bug the violation is an
	// instance of (the known* constants); the tests skip such seeds until
	// the bug is fixed.
	Known string
	// Replay is the command that replays the run (for the default
	// configurations, and -sim.metafaults=false).
	Replay string
}

// ReplayCommand is the command that replays seed under the default
// configuration (add -v -sim.trace to print the run's event trace).
func ReplayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run TestSimulation -sim.seed=%d", seed)
}

// ClusterReplayCommand is the command that replays seed under the default
// cluster configuration.
func ClusterReplayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run TestClusterSimulation -sim.seed=%d", seed)
}

// replayCommand is the command that replays a run of cfg.
func replayCommand(cfg Config) string {
	if !cfg.cluster() {
		return ReplayCommand(cfg.Seed)
	}
	cmd := ClusterReplayCommand(cfg.Seed)
	// A default seed's members (DefaultClusterConfig's, under the
	// default faults) replay with it; other member runs are the member
	// seeds'.
	f := cfg.Faults
	f.SpareMetadataLog = false // a flag of the replay, below
	if cfg.GroupMembers > 0 && f != DefaultClusterFaults() {
		cmd = fmt.Sprintf("go test ./internal/sim -run TestClusterGroupMembers -sim.seed=%d", cfg.Seed)
	}
	if cfg.Faults.SpareMetadataLog {
		cmd += " -sim.metafaults=false"
	}
	return cmd
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: seed %d: invariant %d (%s) violated at event %d: %s\n",
		v.Seed, v.Invariant, invariantName(v.Invariant), v.Event, v.Detail)
	if v.Known != "" {
		fmt.Fprintf(&b, "known bug: %s\n", v.Known)
	}
	fmt.Fprintf(&b, "replay: %s   (add -v -sim.trace for the event trace)\n", v.Replay)
	if len(v.Tail) > 0 {
		b.WriteString("last events:\n")
		for _, l := range v.Tail {
			b.WriteString("  ")
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Run runs one simulation. The error is a *Violation when an invariant
// failed; the Result is filled in either case.
func Run(cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{Seed: cfg.Seed}, err
	}
	s := newSim(cfg.withDefaults())
	release := seedRaftRand(cfg.Seed, &s.actions)
	defer release()
	s.guard(s.run)
	s.guard(s.close)
	res := s.result()
	if s.net != nil {
		s.clusterCounts(&res)
	}
	if s.viol != nil {
		return res, s.viol
	}
	return res, nil
}

// epoch0 is the manual clock's start.
var epoch0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newSim(cfg Config) *sim {
	// A single node and a cluster draw from different streams of the
	// seed's RNG.
	stream, shards := uint64(0x9e3779b97f4a7c15), 3
	if cfg.cluster() {
		stream, shards = 0x6a09e667f3bcc909, 2
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, stream))
	if cfg.Shards == 0 {
		cfg.Shards = 1 + rng.IntN(shards)
	}
	clk := clock.NewManual(epoch0)
	s := &sim{
		base:          newBase(cfg, rng, clk),
		ctx:           context.Background(),
		metaLog:       make(map[uint64]string),
		metaDup:       make(map[uint64]bool),
		placed:        make(map[incKey][][]uint64),
		builds:        make(map[buildKey]int),
		applyFailed:   make(map[buildKey]bool),
		storeFailed:   make(map[buildKey]bool),
		storeOutcomes: make(map[storeKey]uint8),
		fwds:          make(map[fwdKey][]*attempt),
	}
	if !cfg.cluster() {
		// The single node is the liar, and the node before it first
		// opens is its empty disk and its own clock.
		s.liar = 1
		s.lies = newLies(s, func() *vfs.MemFS { return s.nodes[0].mem }, func() *metadata.Store { return s.nodes[0].meta }, metaDir, &s.faults, "")
		s.nodes = []*node{{b: s, mem: vfs.NewMem(), clk: newNodeClock(s.initialSkew()),
			lastServe: make(map[metadata.Namespace]uint64), incs: newTimeline()}}
		return s
	}
	s.compactEntries = [...]uint64{4, 16, 64, shard.DefaultCompactEntries}[rng.IntN(4)]
	s.net = transport.NewNetwork(transport.NetworkOptions{Clock: clk, ManualDelivery: true})
	for i := range cfg.Nodes {
		s.peers = append(s.peers, uint64(i+1))
	}
	s.founders = slices.Clone(s.peers)
	s.startMembers()
	s.startLies()
	return s
}

// drive runs a run whose nodes are open: Config.Steps scheduler steps
// (sim.tick), then more while more says the run must go on, quiescence
// (sim.quiesce) and the final checks, stopping at the first violation.
func (s *sim) drive(more func() bool) {
	for range s.cfg.Steps {
		if s.viol != nil {
			return
		}
		s.tick()
	}
	for more != nil && more() {
		s.tick()
	}
	if s.viol != nil {
		return
	}
	s.quiesce()
	if s.viol != nil {
		return
	}
	finalChecks(s)
	s.event("end")
}

// DefaultSlowLink is the slow-link rate (PeerFaultRates.SlowLink) of the
// default cluster faults: about four spells in a run of the default
// length (cluster seeds 0–499 at this rate drew 2,015), each 100 ms – 2 s
// of one direction of one link — near the rate of the clogs (0.0008) it
// resembles, and enough that 100 default seeds read slow frames whole,
// close connections at their read deadline and lose the frames behind
// them.
const DefaultSlowLink = 0.001

// DefaultConnFlood is the connection-flood rate (PeerFaultRates.ConnFlood)
// of the default cluster faults: about four floods in a run of the
// default length (cluster seeds 0–99 at this rate drew 421), each
// 100 ms – 2 s of one node's listener — the rate the fault was validated
// at (cluster seeds 0–299: 1,205 floods), the slow links' rate, and
// enough that 100 default seeds refuse flood connections at accept,
// close them at their handshake deadline, close a member's oldest past
// MaxPeerConns and admit honest redials.
const DefaultConnFlood = 0.001
