package kafka

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch sessions (KIP-227). A consumer of many partitions sends every
// partition in every Fetch, and is answered for every one, records or
// not. With a session the listener remembers the partitions a client
// fetches (each one's fetch offset and byte limit, as the client last sent
// them), a fetch names only those whose offset or limit changed (and the
// ones it forgets), and the answer holds only the partitions with news:
// records, an error, or a high watermark or start offset that moved since
// the last answer. The listener stores nothing of the records: every
// fetch is served from the partitions, as a full one is.
//
// Sessions are bounded in number (maxFetchSessions, the least recently
// used is evicted) and in partitions, each (maxSessionPartitions) and all
// together (maxSessionPartitionsTotal, so the memory they hold is
// bounded whatever clients send): a fetch asking for a session that
// would exceed either is served in full without one (id 0), which
// KIP-227 allows, and a fetch that would grow a session past them ends
// it (FETCH_SESSION_ID_NOT_FOUND), after which the client starts over.

const (
	maxFetchSessions          = 1_000
	maxSessionPartitions      = 10_000
	maxSessionPartitionsTotal = 100_000
	fetchSessionIdleLimit     = 2 * time.Minute
	maxSessionEpoch           = 1<<31 - 1
)

// sessionKey names a partition of a session: by topic name before Fetch
// v13, by topic ID from it (a session's requests all have one version
// range in practice; the two never mix in one key).
type sessionKey struct {
	topic string
	id    [16]byte
	part  int32
}

// sessionPart is one partition of a session: the request as the client
// last sent it, and what the last answer told it.
type sessionPart struct {
	key      sessionKey
	req      kmsg.FetchRequestTopicPartition
	hw       int64
	logStart int64
	sent     bool
}

type fetchSession struct {
	id    int32
	epoch int32 // the epoch of the last fetch served; the next must carry epoch+1
	parts map[sessionKey]*sessionPart
	order []sessionKey // the order partitions are fetched and answered in
	used  time.Time
	busy  bool // a fetch of it is in flight: another one is refused
	// counted is how many of its partitions fetchSessions.total counts.
	counted int
}

type fetchSessions struct {
	mu     sync.Mutex
	byID   map[int32]*fetchSession
	nextID int32
	total  int // partitions of every session
}

// drop removes s (fs.mu held).
func (fs *fetchSessions) drop(s *fetchSession) {
	delete(fs.byID, s.id)
	fs.total -= s.counted
	s.counted = 0
}

// account counts s's partitions after an update, or reports false when
// every session's together would exceed their bound.
func (fs *fetchSessions) account(s *fetchSession) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delta := len(s.parts) - s.counted
	if fs.total+delta > maxSessionPartitionsTotal {
		return false
	}
	fs.total += delta
	s.counted = len(s.parts)
	return true
}

func newFetchSessions() *fetchSessions {
	return &fetchSessions{byID: map[int32]*fetchSession{}}
}

// open creates a session, evicting the least recently used one (or one
// idle past the limit) when full. It returns nil when no id is free.
func (fs *fetchSessions) open(now time.Time) *fetchSession {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.byID) >= maxFetchSessions {
		var oldest *fetchSession
		for _, s := range fs.byID {
			if !s.busy && (oldest == nil || s.used.Before(oldest.used)) {
				oldest = s
			}
		}
		if oldest == nil {
			return nil
		}
		fs.drop(oldest)
	}
	for range maxFetchSessions + 1 {
		fs.nextID++
		if fs.nextID <= 0 {
			fs.nextID = 1
		}
		if _, taken := fs.byID[fs.nextID]; !taken {
			s := &fetchSession{id: fs.nextID, parts: map[sessionKey]*sessionPart{}, used: now, busy: true}
			fs.byID[s.id] = s
			return s
		}
	}
	return nil
}

// take claims session id for a fetch at epoch, or answers why not.
func (fs *fetchSessions) take(id, epoch int32, now time.Time) (*fetchSession, int16) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s, ok := fs.byID[id]
	if ok && now.Sub(s.used) > fetchSessionIdleLimit && !s.busy {
		fs.drop(s)
		ok = false
	}
	switch {
	case !ok:
		return nil, kerr.FetchSessionIDNotFound.Code
	case s.busy || epoch != nextEpoch(s.epoch):
		return nil, kerr.InvalidFetchSessionEpoch.Code
	}
	s.busy, s.used, s.epoch = true, now, epoch
	return s, 0
}

// nextEpoch is the epoch of the fetch after one at e: e+1, wrapping to 1
// as clients do.
func nextEpoch(e int32) int32 {
	if e == maxSessionEpoch {
		return 1
	}
	return e + 1
}

// release ends a fetch of s: the next must carry the next epoch, or
// (keep false) the session is closed.
func (fs *fetchSessions) release(s *fetchSession, keep bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s.busy = false
	if !keep {
		fs.drop(s)
	}
}

// close drops session id (a fetch at the final epoch).
func (fs *fetchSessions) close(id int32) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if s, ok := fs.byID[id]; ok && !s.busy {
		fs.drop(s)
	}
}

// update applies a fetch's partitions and forgotten topics to s. It
// reports false when the session would hold too many partitions.
func (s *fetchSession) update(r *kmsg.FetchRequest, byID bool) bool {
	for _, ft := range r.ForgottenTopics {
		for _, p := range ft.Partitions {
			k := sessionKey{part: p}
			if byID {
				k.id = ft.TopicID
			} else {
				k.topic = ft.Topic
			}
			delete(s.parts, k)
		}
	}
	kept := s.order[:0]
	for _, k := range s.order {
		if _, ok := s.parts[k]; ok {
			kept = append(kept, k)
		}
	}
	s.order = kept
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			k := sessionKey{part: rp.Partition}
			if byID {
				k.id = rt.TopicID
			} else {
				k.topic = rt.Topic
			}
			if sp, ok := s.parts[k]; ok {
				sp.req = rp
				continue
			}
			if len(s.parts) >= maxSessionPartitions {
				return false
			}
			s.parts[k] = &sessionPart{key: k, req: rp}
			s.order = append(s.order, k)
		}
	}
	return true
}

// request is a full fetch of every partition of s, with r's other fields.
func (s *fetchSession) request(r *kmsg.FetchRequest) *kmsg.FetchRequest {
	full := *r
	full.Topics, full.ForgottenTopics = nil, nil
	full.SessionID, full.SessionEpoch = 0, -1
	var last sessionKey
	for i, k := range s.order {
		if i == 0 || k.topic != last.topic || k.id != last.id {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = k.topic, k.id
			full.Topics = append(full.Topics, ft)
		}
		ft := &full.Topics[len(full.Topics)-1]
		ft.Partitions = append(ft.Partitions, s.parts[k].req)
		last = k
	}
	return &full
}

// incremental keeps in resp, the answer to a full fetch of every
// partition of s, only the partitions with news for the client, and
// records what each answer told it.
func (s *fetchSession) incremental(resp *kmsg.FetchResponse, byID bool, all bool) {
	topics := resp.Topics[:0]
	for _, t := range resp.Topics {
		parts := t.Partitions[:0]
		for _, p := range t.Partitions {
			k := sessionKey{part: p.Partition}
			if byID {
				k.id = t.TopicID
			} else {
				k.topic = t.Topic
			}
			sp := s.parts[k]
			news := all || sp == nil || !sp.sent || len(p.RecordBatches) > 0 || p.ErrorCode != 0 ||
				p.HighWatermark != sp.hw || p.LogStartOffset != sp.logStart
			if sp != nil {
				sp.hw, sp.logStart, sp.sent = p.HighWatermark, p.LogStartOffset, true
			}
			if news {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			t.Partitions = parts
			topics = append(topics, t)
		}
	}
	resp.Topics = topics
}
