package sim

import (
	"bytes"
	cryptorand "crypto/rand"
	"io"
	"runtime"
	"strconv"
	"sync"
)

// etcd raft draws each member's randomized election timeout from
// crypto/rand.Reader (raft.go, globalRand: Intn(electionTimeout) through
// crypto/rand.Int), with no seam of its own. A cluster run must take
// those draws from its seed too, or two runs of one seed elect at
// different ticks and diverge.
//
// Taking them from a seeded stream is not enough: a shard ticks its raft
// groups in map order, so which group gets which value of a stream would
// still vary from run to run. So every draw made during one scheduler
// action gets the same value — a function of the seed and the action's
// index — and the order of the draws within an action no longer matters.
// Members of one group live on different nodes and reset their timers in
// different actions, so they still draw different timeouts.
//
// The first cluster run replaces crypto/rand.Reader, once per process,
// with a reader that serves each registered goroutine that way and
// passes every other goroutine through to the reader it replaced. A run
// registers the goroutine it runs on (every engine call of a run happens
// on it), so runs in parallel goroutines stay independent. The
// replacement happens under a sync.Once that every cluster run passes
// through before its first raft call; a process whose other goroutines
// read crypto/rand.Reader concurrently with the first cluster run would
// race with it (nothing in this module does).
var (
	randOnce     sync.Once
	randMu       sync.Mutex
	randSources  = map[uint64]*actionRand{}
	randFallback io.Reader
)

// actionRand is one run's source: the seed and its action counter.
type actionRand struct {
	seed    uint64
	actions *uint64
	reads   uint64
}

// minElectionTicks is the smallest election timeout (in ticks) of the
// simulated groups: shard.Replication and replica.Config default to 10,
// and the simulator sets no other.
const minElectionTicks = 10

type seededReader struct{}

// Read implements io.Reader. For raft's Intn(n), crypto/rand.Int reads
// big-endian bytes and retries while the value is not below n; a value
// below minElectionTicks ≤ n is taken at once.
func (seededReader) Read(b []byte) (int, error) {
	id := goroutineID()
	randMu.Lock()
	src := randSources[id]
	randMu.Unlock()
	if src == nil {
		return randFallback.Read(b)
	}
	if len(b) == 1 {
		// Raft's election-timeout draw (crypto/rand.Int below 10).
		b[0] = byte(splitmix(src.seed^splitmix(*src.actions)) % minElectionTicks)
		return 1, nil
	}
	// Longer reads (replica proposal-id bases) get the whole width, and a
	// fresh value per read, so two groups started in one action differ.
	randMu.Lock()
	src.reads++
	n := src.reads
	randMu.Unlock()
	x := splitmix(src.seed ^ splitmix(*src.actions) ^ splitmix(n<<32))
	for i := range b {
		if i%8 == 0 && i > 0 {
			x = splitmix(x)
		}
		b[i] = byte(x >> (8 * (i % 8)))
	}
	return len(b), nil
}

// splitmix is SplitMix64's finaliser: a cheap, well-mixed hash.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// seedRaftRand makes the calling goroutine's draws from crypto/rand.Reader
// follow seed and *actions until the returned function is called.
func seedRaftRand(seed uint64, actions *uint64) (release func()) {
	randOnce.Do(func() {
		randFallback = cryptorand.Reader
		cryptorand.Reader = seededReader{}
	})
	id := goroutineID()
	randMu.Lock()
	randSources[id] = &actionRand{seed: seed, actions: actions}
	randMu.Unlock()
	return func() {
		randMu.Lock()
		delete(randSources, id)
		randMu.Unlock()
	}
}

// goroutineID parses the current goroutine's id from its stack header
// ("goroutine 123 [running]:"). Raft draws a timeout only when a member
// changes term or role, so the cost does not matter.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
