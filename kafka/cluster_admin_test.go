package kafka

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestClusterAdminCalls: the admin calls of TestAdminCreateDeleteTopics
// and TestDeleteGroupsAndOffsets through kadm on a 3-node cluster, the
// admin client bootstrapped at a node that leads neither the metadata
// group nor the partition DeleteRecords truncates. Each effect is read
// back at the other nodes: by a raw request to each other listener, by
// clients bootstrapped there, and in each node's parkway topic config.
func TestClusterAdminCalls(t *testing.T) {
	c := startClusterWith(t, 3, func(cfg *Config) { cfg.DisableAutoCreate = true })
	ctx := ctxFor(t)
	var meta int32
	waitUntil(t, "a metadata leader", func() bool {
		st, err := c.nodes[1].Cluster().State(ctx)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		meta = int32(st.MetadataLeader)
		return meta != 0
	})
	at := meta%3 + 1 // the admin's bootstrap: not the metadata leader
	var others []int32
	for id := range int32(3) {
		if id+1 != at {
			others = append(others, id+1)
		}
	}
	adm := kadm.NewClient(c.client([]int32{at}))

	// CreateTopics: the topics, their IDs and partitions at every other
	// listener's Metadata.
	res, err := adm.CreateTopics(ctx, 3, 3, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "orders", "payments")
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil || r.ID == [16]byte{} {
			t.Fatalf("CreateTopics %s: %v, ID %x", r.Topic, r.Err, r.ID)
		}
	}
	if again, _ := adm.CreateTopics(ctx, 1, 3, nil, "orders"); again["orders"].Err == nil || !errors.Is(again["orders"].Err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating an existing topic: %v, want TOPIC_ALREADY_EXISTS", again["orders"].Err)
	}
	// topicsAt is the topics listener id's Metadata names, by name: ID
	// and partition count.
	type seenTopic struct {
		id    [16]byte
		parts int
	}
	topicsAt := func(id int32) map[string]seenTopic {
		t.Helper()
		r := dialRaw(t, c.brokers[id])
		defer r.nc.Close()
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		out := map[string]seenTopic{}
		for _, mt := range r.request(req).(*kmsg.MetadataResponse).Topics {
			if mt.ErrorCode == 0 && mt.Topic != nil {
				out[*mt.Topic] = seenTopic{mt.TopicID, len(mt.Partitions)}
			}
		}
		return out
	}
	for _, id := range others {
		waitUntil(t, fmt.Sprintf("listener %d to list the created topics", id), func() bool {
			got := topicsAt(id)
			return got["orders"] == seenTopic{res["orders"].ID, 3} && got["payments"] == seenTopic{res["payments"].ID, 3}
		})
	}

	// DescribeConfigs and IncrementalAlterConfigs through the admin; the
	// configs read back at each other listener and in each node's topic.
	configAt := func(id int32, topic, key string) string {
		t.Helper()
		r := dialRaw(t, c.brokers[id])
		defer r.nc.Close()
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Version = 4
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		req.Resources = append(req.Resources, rr)
		resp := r.request(req).(*kmsg.DescribeConfigsResponse)
		if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("DescribeConfigs of %s at %d: %+v", topic, id, resp.Resources)
		}
		for _, cfg := range resp.Resources[0].Configs {
			if cfg.Name == key && cfg.Value != nil {
				return *cfg.Value
			}
		}
		return ""
	}
	for _, id := range others {
		if v := configAt(id, "orders", "retention.ms"); v != "3600000" {
			t.Fatalf("orders' retention.ms at %d is %q, want 3600000", id, v)
		}
	}
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("1048576")},
		{Op: kadm.SetConfig, Name: "parkway.fsync", Value: kadm.StringPtr("always")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
	}, "orders")
	if err != nil || altered[0].Err != nil {
		t.Fatalf("AlterTopicConfigs: %v %+v", err, altered)
	}
	stream, err := c.nodes[at].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range others {
		waitUntil(t, fmt.Sprintf("listener %d to read the altered configs", id), func() bool {
			return configAt(id, "orders", "retention.bytes") == "1048576" && configAt(id, "orders", "parkway.fsync") == "always" &&
				configAt(id, "orders", "retention.ms") == "-1"
		})
		orders, err := c.nodes[id].Topic(ctx, stream, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.nodes[id].Admin().TopicInfo(ctx, orders); err != nil || info.Config.RetentionBytes != 1<<20 || info.Config.Fsync != parkway.FsyncAlways || info.Config.RetentionAge != 0 {
			t.Fatalf("node %d's config of orders: %+v %v", id, info.Config, err)
		}
	}
	if bad, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr("2")}}, "orders"); err != nil || bad[0].Err == nil {
		t.Fatalf("an unsupported config was accepted: %v %+v", err, bad)
	}

	// CreatePartitions grows payments to 5; a partition the admin's node
	// does not lead is produced to and truncated by DeleteRecords.
	grown, err := adm.UpdatePartitions(ctx, 5, "payments")
	if err != nil || grown["payments"].Err != nil {
		t.Fatalf("UpdatePartitions: %v %v", err, grown["payments"].Err)
	}
	if shrink, _ := adm.UpdatePartitions(ctx, 2, "payments"); shrink["payments"].Err == nil {
		t.Fatal("shrinking a topic was not refused")
	}
	for _, id := range others {
		waitUntil(t, fmt.Sprintf("listener %d to see 5 partitions", id), func() bool { return topicsAt(id)["payments"].parts == 5 })
	}
	payments, err := c.nodes[at].Topic(ctx, stream, "payments")
	if err != nil {
		t.Fatal(err)
	}
	part, lead := int32(-1), int32(0)
	waitUntil(t, "a partition of payments led by another node than the admin's bootstrap", func() bool {
		for p := range int32(5) {
			l, err := c.nodes[at].Cluster().Leader(ctx, payments, uint32(p))
			if err == nil && l != 0 && int32(l) != at {
				part, lead = p, int32(l)
				if lead != meta {
					return true // neither the admin's node nor the metadata leader
				}
			}
		}
		return part >= 0
	})
	prod := c.client([]int32{at}, kgo.DefaultProduceTopic("payments"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i)), Partition: part}).FirstErr(); err != nil {
			t.Fatalf("produce to partition %d: %v", part, err)
		}
	}
	var cut kadm.Offsets
	cut.AddOffset("payments", part, 7, -1)
	deleted, err := adm.DeleteRecords(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := deleted.Lookup("payments", part); d.Err != nil || d.LowWatermark != 7 {
		t.Fatalf("DeleteRecords: %+v", d)
	}
	for _, id := range others {
		starts, err := kadm.NewClient(c.client([]int32{id})).ListStartOffsets(ctx, "payments")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := starts.Lookup("payments", part); o.Err != nil || o.Offset != 7 {
			t.Fatalf("partition %d starts at %d (%v) through %d after DeleteRecords, want 7", part, o.Offset, o.Err, id)
		}
		if po, err := c.nodes[id].Admin().PartitionOffsets(ctx, payments, uint32(part), ""); err != nil || po.Start != 7 || po.End != 10 {
			t.Fatalf("node %d reads partition %d as %+v (%v), want 7..10", id, part, po, err)
		}
	}

	// Groups: a member bootstrapped at another node commits; ListGroups,
	// DescribeGroups, OffsetDelete and DeleteGroups through the admin, their
	// effects read through clients bootstrapped at the other nodes.
	const group = "cluster-admin"
	member := c.client([]int32{others[0]}, kgo.ConsumerGroup(group), kgo.ConsumeTopics("payments"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	recs := consume(t, member, 3)
	if err := member.CommitRecords(ctx, recs...); err != nil {
		t.Fatalf("CommitRecords: %v", err)
	}
	waitUntil(t, "the member's group to be stable", func() bool {
		d, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			t.Fatalf("DescribeGroups: %v", err)
		}
		g := d[group]
		return g.Err == nil && g.State == "Stable" && len(g.Members) == 1
	})
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if _, ok := listed[group]; !ok {
		t.Fatalf("ListGroups: %v, want %s", listed.Groups(), group)
	}
	committedAt := func(id int32) map[string]int {
		t.Helper()
		offs, err := kadm.NewClient(c.client([]int32{id})).FetchOffsets(ctx, group)
		if err != nil || offs.Error() != nil {
			t.Fatalf("FetchOffsets through %d: %v %v", id, err, offs.Error())
		}
		out := map[string]int{}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = int(o.At)
			}
		})
		return out
	}
	want := map[string]int{}
	for _, r := range recs {
		want[fmt.Sprintf("%s/%d", r.Topic, r.Partition)] = max(want[fmt.Sprintf("%s/%d", r.Topic, r.Partition)], int(r.Offset)+1)
	}
	for _, id := range others {
		if got := committedAt(id); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("committed through %d: %v, want %v", id, got, want)
		}
	}
	if res, _ := adm.DeleteGroups(ctx, group); !errors.Is(res[group].Err, kerr.NonEmptyGroup) {
		t.Fatalf("DeleteGroups of a group with a member: %v, want NON_EMPTY_GROUP", res[group].Err)
	}
	member.Close() // leaves the group
	waitUntil(t, "the group to be empty", func() bool {
		d, err := adm.DescribeGroups(ctx, group)
		return err == nil && d[group].Err == nil && len(d[group].Members) == 0
	})
	// An offset committed into the empty group (generation -1), then the
	// member's partition removed by OffsetDelete.
	var extra kadm.Offsets
	extra.AddOffset("orders", 0, 0, -1)
	if res, err := adm.CommitOffsets(ctx, group, extra); err != nil || res.Error() != nil {
		t.Fatalf("CommitOffsets into the empty group: %v %v", err, res.Error())
	}
	want["orders/0"] = 0
	del, err := adm.DeleteOffsets(ctx, group, kadm.TopicsSet{"payments": {part: {}}})
	if err != nil {
		t.Fatalf("DeleteOffsets: %v", err)
	}
	if err, _ := del.Lookup("payments", part); err != nil {
		t.Fatalf("OffsetDelete of payments/%d: %v", part, err)
	}
	delete(want, fmt.Sprintf("payments/%d", part))
	for _, id := range others {
		if got := committedAt(id); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("committed through %d after OffsetDelete: %v, want %v", id, got, want)
		}
	}
	if res, err := adm.DeleteGroups(ctx, group); err != nil || res[group].Err != nil {
		t.Fatalf("DeleteGroups: %v %v", err, res[group].Err)
	}
	for _, id := range others {
		if got := committedAt(id); len(got) != 0 {
			t.Fatalf("committed through %d after DeleteGroups: %v", id, got)
		}
		d, err := kadm.NewClient(c.client([]int32{id})).DescribeGroups(ctx, group)
		if err != nil {
			t.Fatalf("DescribeGroups through %d: %v", id, err)
		}
		if g := d[group]; g.Err == nil && g.State != "Dead" && g.State != "Empty" {
			t.Fatalf("the deleted group through %d: %+v", id, g)
		}
	}

	// DeleteTopics: gone at every other listener.
	if del, err := adm.DeleteTopics(ctx, "orders"); err != nil || del["orders"].Err != nil {
		t.Fatalf("DeleteTopics: %v %v", err, del["orders"].Err)
	}
	for _, id := range others {
		waitUntil(t, fmt.Sprintf("listener %d to drop the deleted topic", id), func() bool {
			got := topicsAt(id)
			_, has := got["orders"]
			return !has && got["payments"].parts == 5
		})
	}
	if gone, err := adm.DeleteTopics(ctx, "orders"); err != nil || gone["orders"].Err == nil {
		t.Fatalf("deleting a deleted topic: %v %v, want an error", err, gone["orders"].Err)
	}
	t.Logf("admin bootstrapped at %d; metadata leader %d; DeleteRecords on partition %d led by %d", at, meta, part, lead)
}
