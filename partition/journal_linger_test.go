package partition

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// journalSyncTime is how long a journal fdatasync takes in the linger
// tests' bubbles (synctest's fake clock): the leaders' linger budget is a
// quarter of it.
const journalSyncTime = 400 * time.Microsecond

// lingerStore is a store on an in-memory filesystem whose journal
// fdatasyncs take journalSyncTime of the bubble's fake time (a sleep in a
// synctest bubble blocks until the fake clock reaches its end, which it
// does at once when every goroutine of the bubble waits: it models the
// fdatasync's duration, it synchronises nothing). It counts them.
func lingerStore(t *testing.T) (*FileStore, func() int) {
	t.Helper()
	var mu sync.Mutex
	syncs := 0
	slow := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, journalExt) {
			mu.Lock()
			syncs++
			mu.Unlock()
			time.Sleep(journalSyncTime)
		}
		return nil
	})
	s, err := NewFileStore(FileConfig{Dir: "/data", FS: errorfs.New(vfs.NewMem(), slow)})
	if err != nil {
		t.Fatal(err)
	}
	return s, func() int { mu.Lock(); defer mu.Unlock(); return syncs }
}

// attached builds partition i deferred and attaches it to j, as a shard
// does with a new topic's partition under FsyncAlways.
func attached(t *testing.T, s *FileStore, j *Journal, i uint32) Partition {
	t.Helper()
	p, err := s.BuildDeferred(journalNS(t, i), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if !j.Attach(p) {
		t.Fatal("the deferred partition did not attach")
	}
	return p
}

// produceOne appends one message to p and commits it through j.
func produceOne(j *Journal, p Partition) error {
	if _, err := p.Append([]Message{{Payload: []byte("m")}}); err != nil {
		return err
	}
	return errors.Join(j.Commit([]Partition{p})...)
}

// runProducers runs one producer per script, each on a handle and a
// partition of its own (a shard's): before each of its produces it takes
// the script's next duration (its turnaround: the answer, and the next
// call).
func runProducers(t *testing.T, s *FileStore, scripts ...[]time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for h, script := range scripts {
		j := s.NewJournal()
		p := attached(t, s, j, uint32(h))
		wg.Go(func() {
			for _, d := range script {
				time.Sleep(d)
				if err := produceOne(j, p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A lone sequential producer whose topics land on one shard and then the
// other (case 6 of issue 33: create a topic, produce to it, create the
// next) takes turns between the handles: each write carries one handle,
// and no write is in flight when the next begins. Its leader must not
// linger for the handle of the last write, whose only producer is the
// one now waiting: the old prediction (that handle's producers were just
// answered and are producing again) made every change of shard wait out
// the whole budget. After soloRun such writes it lingers no more: of 20
// alternating commits only the second (the first write's handle awaited,
// as after a shared write) waits, and every other one takes exactly its
// fdatasync.
func TestJournalLoneProducerAlternatingShardsDoesNotLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, syncs := lingerStore(t)
		handles := [2]*Journal{s.NewJournal(), s.NewJournal()}
		var lingered []int
		for i := range uint32(20) {
			j := handles[i%2]
			p := attached(t, s, j, i)
			start := time.Now()
			if err := produceOne(j, p); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			switch {
			case took == journalSyncTime:
			case took == journalSyncTime+journalSyncTime/lingerShare:
				lingered = append(lingered, int(i))
			default:
				t.Fatalf("commit %d took %v, want its fdatasync (%v) or that and a linger budget", i, took, journalSyncTime)
			}
		}
		if len(lingered) > soloRun-1 {
			t.Fatalf("commits %v lingered for a handle with nothing to send (want at most the first %d after the first write)", lingered, soloRun-1)
		}
		if n := syncs(); n != 20 {
			t.Fatalf("%d journal fdatasyncs for 20 commits, want 20", n)
		}
	})
}

// Synchronous producers on two shards whose turns overlap (case 4 of
// issue 33, the linger's purpose): each shard's producer commits again a
// little after its answer, well within the linger budget. The leader
// that queued behind the other shard's write lingers for it, the other
// shard's producer comes back, and from then on every write carries both
// shards: one fdatasync per round, not two. It pins that the prediction
// that stops the lone producer's lingering keeps this one's.
func TestJournalOverlappingProducersShareWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, syncs := lingerStore(t)
		const rounds = 20
		turnaround := journalSyncTime / lingerShare / 10
		// The second shard's first produce arrives while the first
		// shard's write is in flight.
		first := make([]time.Duration, rounds)
		second := make([]time.Duration, rounds)
		for k := 1; k < rounds; k++ {
			first[k], second[k] = turnaround, turnaround
		}
		second[0] = turnaround
		runProducers(t, s, first, second)
		// The first write carries the first shard alone; the second
		// shard's leader queued behind it and lingers for the first, so
		// every write after carries both.
		if n := syncs(); n > rounds+1 {
			t.Fatalf("%d journal fdatasyncs for %d rounds of two shards, want at most %d (each write shared by both)", n, rounds, rounds+1)
		}
	})
}

// A solo write between shared ones does not stop the lingering (soloRun):
// two shards whose producers are both late once. Scripted on the fake
// clock (S the fdatasync, the budget S/4): a writes alone (the first
// write), b queues behind it and lingers for a, which comes back, so the
// second write is shared; a's next leader lingers for b, which is late,
// and writes alone (the third); b comes back after that write returned,
// with nothing in flight, and lingers for a, the handle of that solo
// write, whose producer comes back within the budget: the fourth write is
// shared. Four fdatasyncs; a leader that stopped lingering after one solo
// write would write b alone, then a alone (five).
func TestJournalSoloWriteBetweenSharedOnesKeepsLingering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, syncs := lingerStore(t)
		budget := journalSyncTime / lingerShare
		quick := budget / 10
		// Before each commit, how long each shard's producer takes.
		script := [2][]time.Duration{
			// a: at 0 (alone); at S+quick (shared, ends 2S+quick); at
			// 2S+2quick it lingers out its budget and writes alone,
			// returning at 3S+2quick+budget; then late, back at
			// 3S+2quick+3budget/2, quick after b: within b's budget.
			{0, quick, quick, budget / 2},
			// b: queues at quick, behind a's first write, and is in
			// the shared one; then late, back at 3S+quick+3budget/2,
			// after a's solo write returned and before a comes back.
			{quick, journalSyncTime + budget + budget/2},
		}
		runProducers(t, s, script[0], script[1])
		if n := syncs(); n != 4 {
			t.Fatalf("%d journal fdatasyncs, want 4: a, a+b, a (its linger for b timed out), b+a (b lingered for a after a's solo write)", n)
		}
	})
}
