package main

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

const dumpUsage = `usage: parkway dump [flags] DIR --stream S --topic T --partition P [--from N] [--count K]

Prints the messages of one partition of the data directory DIR as JSON
lines, oldest first, one object per message:

  {"offset":0,"id":"…","timestamp":"…","append_time":"…","key":"…",
   "headers":[{"key":"…","value":"…"}],"payload":"…"}

Keys, header values and payloads that are valid UTF-8 are printed as
text; others as base64 in "key_base64", "value_base64" and
"payload_base64" instead. Timestamps are RFC 3339 in UTC (the producer's
timestamp and the time the node appended the message). S and T are
names or numeric ids.

It reads the partition as a node restoring it would, changing nothing:
the records of its files, then those the node's journal holds beyond
them, which a node opening DIR replays into the files; a partition with
no directory yet that lives in the journal is read from the journal.

Exit codes: 0 ok; 1 damaged data stopped the dump (the messages before
it are printed); 2 usage error (including no such stream, topic,
partition or offset); 3 DIR cannot be read (missing, not a parkway data
directory, permission denied, held by a running node without --force).
`

// dumpedMessage is one JSON line of dump.
type dumpedMessage struct {
	Offset        uint64         `json:"offset"`
	ID            string         `json:"id,omitempty"`
	Timestamp     string         `json:"timestamp"`
	AppendTime    string         `json:"append_time"`
	Key           *string        `json:"key,omitempty"`
	KeyBase64     string         `json:"key_base64,omitempty"`
	Headers       []dumpedHeader `json:"headers,omitempty"`
	Payload       *string        `json:"payload,omitempty"`
	PayloadBase64 string         `json:"payload_base64,omitempty"`
}

type dumpedHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 string  `json:"value_base64,omitempty"`
}

func runDump(args []string, stdout, stderr io.Writer) error {
	f := newFlags("dump", dumpUsage, stderr)
	force := f.Bool("force", false, "read a directory a running node holds (the data may be moving)")
	stream := f.String("stream", "", "the stream, by name or id (required)")
	topic := f.String("topic", "", "the topic, by name or id (required)")
	part := f.Int("partition", -1, "the partition id (required)")
	from := f.Int64("from", -1, "the first offset to print (default: the partition's start)")
	count := f.Int64("count", -1, "how many messages to print at most (default: all)")
	pos, err := f.parse(args, stdout)
	if err != nil {
		return err
	}
	dir, err := oneDir("dump", pos)
	if err != nil {
		return err
	}
	switch {
	case *stream == "" || *topic == "" || *part < 0:
		return usageErr("dump: --stream, --topic and --partition are required")
	case *count == 0:
		return nil
	case *from < -1 || *count < -1:
		return usageErr("dump: --from and --count cannot be negative")
	}
	d, err := openDataDir(dir, *force, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	meta, _, err := d.loadMetadata()
	if err != nil {
		path, off := locate(err, d.path)
		return problemsErr(fmt.Errorf("the metadata cannot be read (%s at byte %d): %v; run parkway verify", d.rel(path), off, describe(err)))
	}
	ns, epoch, err := findPartition(meta, *stream, *topic, *part)
	if err != nil {
		return err
	}
	p, err := d.store.Build(ns, epoch)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		// No directory (or another incarnation's): a deferred partition
		// lives in the node's journal until it needs files, and the
		// node rebuilds it from there (DESIGN behaviour 32).
		t, terr := d.store.JournalTail(ns, 0)
		_, serr := d.fsys.Stat(partitionDir(d.path, ns))
		switch {
		case terr == nil && t.Rebuild && t.Epoch == epoch:
			return dumpMessages(stdout, t.Messages, 0, *from, *count)
		case terr == nil && t.Entries == 0 && errors.Is(serr, fs.ErrNotExist) && !neverSynced(meta, ns):
			// No record yet (or a lost directory: parkway verify notes
			// that the two look the same).
			return dumpMessages(stdout, nil, 0, *from, *count)
		}
	}
	if err != nil {
		path, off := locate(err, partitionDir(d.path, ns))
		if errors.Is(err, partition.ErrCorrupt) {
			return problemsErr(fmt.Errorf("%s at byte %d: %v", d.rel(path), off, describe(err)))
		}
		return dirErr(fmt.Errorf("partition %s/%s/%d: %w", *stream, *topic, *part, err))
	}
	defer p.Close()
	// The records the node acknowledged through its journal and replays
	// into the files when it opens the directory follow the files' own.
	var tail []partition.Message
	if t, err := d.store.JournalTail(ns, p.NextOffset()); err != nil {
		fmt.Fprintf(stderr, "parkway: warning: the journal cannot be read (%v); the records a node would replay from it into the partition's files are not shown\n", describe(err))
	} else if !t.Rebuild {
		tail = t.Messages
	}
	end := p.NextOffset() + uint64(len(tail))
	next := p.StartOffset()
	if *from >= 0 {
		next = uint64(*from)
	}
	if next < p.StartOffset() || next > end {
		return usageErr("dump: offset %d is outside the partition's log [%d, %d)", next, p.StartOffset(), end)
	}
	left := uint64(*count)
	if *count < 0 {
		left = end - next
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for left > 0 && next < p.NextOffset() {
		msgs, err := p.Read(next, int(min(left, 1000)))
		if err != nil {
			// Print what precedes the damage: one message at a time up
			// to it.
			for ; left > 0; left-- {
				one, rerr := p.Read(next, 1)
				if rerr != nil || len(one) == 0 {
					break
				}
				if err := enc.Encode(dumped(&one[0])); err != nil {
					return err
				}
				next++
			}
			w.Flush()
			path, off := locate(err, partitionDir(d.path, ns))
			return problemsErr(fmt.Errorf("reading offset %d: %s at byte %d: %v", next, d.rel(path), off, describe(err)))
		}
		if len(msgs) == 0 {
			break
		}
		for i := range msgs {
			if err := enc.Encode(dumped(&msgs[i])); err != nil {
				return err
			}
		}
		next = msgs[len(msgs)-1].Offset + 1
		left -= uint64(len(msgs))
	}
	if left > 0 && next >= p.NextOffset() && next < end {
		if err := w.Flush(); err != nil {
			return err
		}
		return dumpMessages(stdout, tail, p.NextOffset(), int64(next), int64(left))
	}
	return w.Flush()
}

// neverSynced reports whether ns's topic is configured FsyncNever: its
// partitions get files when they are built, never living in the journal.
func neverSynced(meta *metadata.Store, ns metadata.Namespace) bool {
	tp, ok := meta.Topic(ns.Stream(), ns.Topic())
	return ok && tp.Config.Fsync == metadata.FsyncNever
}

// dumpMessages prints, as JSON lines, count (all if negative) of msgs,
// which hold the offsets from start on, from offset from (start if
// negative).
func dumpMessages(stdout io.Writer, msgs []partition.Message, start uint64, from, count int64) error {
	end := start + uint64(len(msgs))
	next := start
	if from >= 0 {
		next = uint64(from)
	}
	if next < start || next > end {
		return usageErr("dump: offset %d is outside the partition's log [%d, %d)", next, start, end)
	}
	msgs = msgs[next-start:]
	if count >= 0 && uint64(count) < uint64(len(msgs)) {
		msgs = msgs[:count]
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range msgs {
		if err := enc.Encode(dumped(&msgs[i])); err != nil {
			return err
		}
	}
	return w.Flush()
}

// findPartition resolves stream, topic (names or ids) and partition in
// the metadata.
func findPartition(meta *metadata.Store, stream, topic string, part int) (metadata.Namespace, uint64, error) {
	var st metadata.StreamInfo
	ok := false
	if id, err := strconv.ParseUint(stream, 10, 32); err == nil {
		st, ok = meta.Stream(uint32(id))
	}
	if !ok {
		st, ok = meta.StreamByName(stream)
	}
	if !ok {
		return 0, 0, usageErr("dump: no stream %q", stream)
	}
	var tp metadata.TopicInfo
	ok = false
	if id, err := strconv.ParseUint(topic, 10, 32); err == nil {
		tp, ok = meta.Topic(st.ID, uint32(id))
	}
	if !ok {
		tp, ok = meta.TopicByName(st.ID, topic)
	}
	if !ok {
		return 0, 0, usageErr("dump: no topic %q in stream %q", topic, st.Name)
	}
	if part >= tp.Partitions {
		return 0, 0, usageErr("dump: topic %s/%s has %d partitions, no partition %d", st.Name, tp.Name, tp.Partitions, part)
	}
	ns, err := metadata.NewNamespace(st.ID, tp.ID, uint32(part))
	if err != nil {
		return 0, 0, usageErr("dump: %v", err)
	}
	epoch, ok := meta.CreatedRevision(ns)
	if !ok {
		return 0, 0, usageErr("dump: no partition %d in %s/%s", part, st.Name, tp.Name)
	}
	return ns, epoch, nil
}

// dumped is m as a JSON line.
func dumped(m *partition.Message) dumpedMessage {
	out := dumpedMessage{Offset: m.Offset, Timestamp: micros(m.Timestamp), AppendTime: micros(m.AppendTime)}
	if m.ID != ([16]byte{}) {
		out.ID = hex.EncodeToString(m.ID[:])
	}
	if m.Key != nil {
		out.Key, out.KeyBase64 = text(m.Key)
	}
	for _, h := range m.Headers {
		dh := dumpedHeader{Key: h.Key}
		dh.Value, dh.ValueBase64 = text(h.Value)
		out.Headers = append(out.Headers, dh)
	}
	out.Payload, out.PayloadBase64 = text(m.Payload)
	return out
}

// text is b as a string when it is valid UTF-8, else as base64.
func text(b []byte) (*string, string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

func micros(us int64) string {
	return time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
}
