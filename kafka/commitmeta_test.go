package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/parkway-io/parkway"
)

// TestCommitMetadataKeptInGroupLog: OffsetCommit's metadata string is
// kept with the offset in the group log and OffsetFetch answers it,
// through kadm: a later commit replaces it, one over maxCommitMetadata
// bytes is refused with OFFSET_METADATA_TOO_LARGE (the offset and
// metadata before it stay), and after a restart the coordinator that
// replays the group log answers the same.
func TestCommitMetadataKeptInGroupLog(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxFor(t)
	start := func() (*kadm.Client, func()) {
		node, err := parkway.Open(parkway.Config{Shards: 1, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		l := listen(t, node, Config{})
		cl, err := kgo.NewClient(kgo.SeedBrokers(l.addr))
		if err != nil {
			t.Fatal(err)
		}
		return kadm.NewClient(cl), func() {
			cl.Close()
			l.stop()
			if err := node.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	adm, stop := start()
	const topic, group = "meta", "meta-group"
	if res, err := adm.CreateTopics(ctx, 2, 1, nil, topic); err != nil || res[topic].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topic].Err)
	}
	commit := func(part int32, at int64, meta string) error {
		t.Helper()
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: topic, Partition: part, At: at, LeaderEpoch: -1, Metadata: meta})
		res, err := adm.CommitOffsets(ctx, group, offs)
		if err != nil {
			t.Fatalf("CommitOffsets: %v", err)
		}
		return res.Error()
	}
	fetched := func(adm *kadm.Client) map[int32]kadm.OffsetResponse {
		t.Helper()
		res, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("FetchOffsets: %v", err)
		}
		out := map[int32]kadm.OffsetResponse{}
		res.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic {
				out[o.Partition] = o
			}
		})
		return out
	}
	if err := commit(0, 5, "first"); err != nil {
		t.Fatal(err)
	}
	if err := commit(0, 7, "second"); err != nil {
		t.Fatal(err)
	}
	if err := commit(1, 3, ""); err != nil {
		t.Fatal(err)
	}
	most := strings.Repeat("m", maxCommitMetadata)
	if err := commit(1, 4, most); err != nil {
		t.Fatalf("metadata of exactly the bound: %v", err)
	}
	if err := commit(0, 9, most+"m"); !errors.Is(err, kerr.OffsetMetadataTooLarge) {
		t.Fatalf("metadata over the bound: %v, want OFFSET_METADATA_TOO_LARGE", err)
	}
	check := func(adm *kadm.Client, when string) {
		t.Helper()
		got := fetched(adm)
		if o := got[0]; o.Err != nil || o.At != 7 || o.Metadata != "second" {
			t.Errorf("%s: partition 0 at %d with metadata %q (%v), want 7 with \"second\"", when, o.At, o.Metadata, o.Err)
		}
		if o := got[1]; o.Err != nil || o.At != 4 || o.Metadata != most {
			t.Errorf("%s: partition 1 at %d with %d bytes of metadata (%v), want 4 with %d", when, o.At, len(o.Metadata), o.Err, len(most))
		}
	}
	check(adm, "committed")
	stop()

	adm, stop = start()
	defer stop()
	check(adm, "after a restart")
}
