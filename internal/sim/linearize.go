package sim

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// linIn is an operation's input in a partition history.
type linIn struct {
	kind        opKind
	ids         []uint64 // produce: the message ids, in order
	from        uint64   // poll
	count       int      // poll
	consumer    string   // poll with consumer, store, get
	useConsumer bool     // poll
	offset      uint64   // store
	// stale: a poll served by a replica's own copy, which may lag the log
	// (cluster mode, a Local poll): it must return, at each offset, what
	// the log holds there, but may stop short of the log's end, and start
	// from a consumer offset the replica has not caught up with.
	stale bool
	// wait: a waiting poll of the leader. Answered empty, with its own
	// offset as the next one, it claims nothing about the log: the
	// leader of a quiesced group answers an idle poll's expiry without
	// confirming its leadership (shard/wait.go), so a deposed leader may
	// answer "nothing yet" for an offset its successor has filled.
	wait bool
}

// linOut is an operation's output.
type linOut struct {
	unknown    bool     // produce, store: outcome unknown
	outOfRange bool     // store: refused as past the end of the log
	offset     uint64   // produce: first offset; poll: next offset; get: the offset
	found      bool     // get
	ids        []uint64 // poll: the message ids read, from its start offset on
}

// linState is the model: an append-only log (message ids by offset) and
// consumer offsets. States are never mutated: Step copies.
type linState struct {
	log  []uint64
	offs map[string]uint64
}

var logModel = porcupine.Model{
	Init: func() any { return linState{} },
	Step: func(st, input, output any) (bool, any) {
		s, in, out := st.(linState), input.(linIn), output.(linOut)
		n := uint64(len(s.log))
		switch in.kind {
		case kindProduce, kindBatch:
			if !out.unknown && out.offset != n {
				return false, nil
			}
			return true, linState{log: append(slices.Clip(s.log), in.ids...), offs: s.offs}
		case kindPoll:
			from := in.from
			if in.useConsumer {
				from = s.offs[in.consumer] // absent: the start offset, 0
			}
			if in.stale {
				// The replica's copy is a prefix of the log, of any length,
				// and its consumer offsets may lag: what the poll returned
				// must be the log's from where it started.
				k := uint64(len(out.ids))
				if in.useConsumer {
					if out.offset < k {
						return false, nil
					}
					from = out.offset - k
				}
				if k == 0 && !in.useConsumer && out.offset < from {
					// Past the replica's end: a poll reads as the end,
					// so it answered the replica's end, a prefix of the
					// log.
					return out.offset <= n, s
				}
				if k > uint64(in.count) || out.offset != from+k || (k > 0 && from+k > n) {
					return false, nil
				}
				return k == 0 || slices.Equal(s.log[from:from+k], out.ids), s
			}
			if in.wait && len(out.ids) == 0 && out.offset == from {
				return true, s
			}
			// A poll past the end reads as the end: Next is the end.
			lo, hi := min(from, n), min(from+uint64(in.count), n)
			want := s.log[lo:hi]
			return slices.Equal(want, out.ids) && out.offset == lo+uint64(len(want)), s
		case kindStore:
			fits := in.offset <= n
			switch {
			case out.outOfRange:
				return !fits, s
			case !fits:
				return out.unknown, s // an unknown store past the end failed
			}
			offs := maps.Clone(s.offs)
			if offs == nil {
				offs = map[string]uint64{}
			}
			offs[in.consumer] = in.offset
			return true, linState{log: s.log, offs: offs}
		case kindGet:
			off, ok := s.offs[in.consumer]
			return ok == out.found && (!ok || off == out.offset), s
		}
		return false, nil
	},
	Equal: func(a, b any) bool {
		x, y := a.(linState), b.(linState)
		return slices.Equal(x.log, y.log) && maps.Equal(x.offs, y.offs)
	},
	Hash: func(st any) uint64 {
		s := st.(linState)
		h := fnv.New64a()
		for _, id := range s.log {
			fmt.Fprintf(h, "%d,", id)
		}
		for _, k := range slices.Sorted(maps.Keys(s.offs)) {
			fmt.Fprintf(h, "%s=%d;", k, s.offs[k])
		}
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		return describeLin(input.(linIn), output.(linOut))
	},
}

// linOp is one operation of a partition history.
type linOp struct {
	op        uint64
	client    int
	in        linIn
	out       linOut
	call, ret int64
}

type checkResult uint8

const (
	checkOK checkResult = iota
	checkIllegal
	checkUnknown
)

// checkTimeout bounds one history's check; histories here are small, and
// a timeout is reported as unchecked, never as a pass or a failure.
const checkTimeout = 20 * time.Second

func check(h []linOp) checkResult {
	ops := make([]porcupine.Operation, len(h))
	for i, o := range h {
		ops[i] = porcupine.Operation{ClientId: max(o.client, 0), Input: o.in, Call: o.call, Output: o.out, Return: o.ret}
	}
	switch porcupine.CheckOperationsTimeout(logModel, ops, checkTimeout) {
	case porcupine.Illegal:
		return checkIllegal
	case porcupine.Unknown:
		return checkUnknown
	}
	return checkOK
}

func describeLin(in linIn, out linOut) string {
	var b strings.Builder
	switch in.kind {
	case kindProduce, kindBatch:
		fmt.Fprintf(&b, "produce %v", in.ids)
		if out.unknown {
			b.WriteString(" -> unknown")
		} else {
			fmt.Fprintf(&b, " -> offset %d", out.offset)
		}
	case kindPoll:
		if in.useConsumer {
			fmt.Fprintf(&b, "poll consumer %s count %d", in.consumer, in.count)
		} else {
			fmt.Fprintf(&b, "poll from %d count %d", in.from, in.count)
		}
		if in.stale {
			b.WriteString(" (local replica)")
		}
		fmt.Fprintf(&b, " -> %v next %d", out.ids, out.offset)
	case kindStore:
		fmt.Fprintf(&b, "store %s=%d", in.consumer, in.offset)
		switch {
		case out.unknown:
			b.WriteString(" -> unknown")
		case out.outOfRange:
			b.WriteString(" -> out of range")
		default:
			b.WriteString(" -> ok")
		}
	case kindGet:
		fmt.Fprintf(&b, "get %s -> %d found %v", in.consumer, out.offset, out.found)
	}
	return b.String()
}

// describeHistory lists a history in call order, for a failure report.
func describeHistory(h []linOp) string {
	sorted := slices.Clone(h)
	slices.SortFunc(sorted, func(a, b linOp) int { return int(a.call - b.call) })
	var b strings.Builder
	for i, o := range sorted {
		if i == 60 {
			fmt.Fprintf(&b, "  ... %d more\n", len(sorted)-i)
			break
		}
		ret := fmt.Sprint(o.ret)
		if o.ret >= unknownReturn {
			ret = "never"
		}
		fmt.Fprintf(&b, "  op %d client %d [%d, %s] %s\n", o.op, o.client, o.call, ret, describeLin(o.in, o.out))
	}
	return b.String()
}
