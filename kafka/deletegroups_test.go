package kafka

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDeleteGroupsAndOffsets drives DeleteGroups and OffsetDelete with
// franz-go's kadm, as Kafka defines them: a group with members is not
// deleted (NON_EMPTY_GROUP) and its offsets of a topic its members
// subscribe to are not removed (GROUP_SUBSCRIBED_TO_TOPIC), while those of
// other topics are; a group without members loses every committed
// offset; an unknown group is GROUP_ID_NOT_FOUND. What was removed is
// gone from the group log (OffsetFetch reads none).
func TestDeleteGroupsAndOffsets(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 2})
	ctx := ctxFor(t)
	adm := kadm.NewClient(f.client(t))
	for _, topic := range []string{"subscribed", "other"} {
		if res, err := adm.CreateTopics(ctx, 2, 1, nil, topic); err != nil || res[topic].Err != nil {
			t.Fatalf("CreateTopics %s: %v %v", topic, err, res[topic].Err)
		}
	}
	prod := f.client(t)
	for i := range 10 {
		for _, topic := range []string{"subscribed", "other"} {
			prod.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i))}, nil)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	commit := func(group string) {
		t.Helper()
		var os kadm.Offsets
		for _, topic := range []string{"subscribed", "other"} {
			for p := range int32(2) {
				os.AddOffset(topic, p, 0, -1)
			}
		}
		res, err := adm.CommitOffsets(ctx, group, os)
		if err != nil || res.Error() != nil {
			t.Fatalf("CommitOffsets %s: %v %v", group, err, res.Error())
		}
	}
	committed := func(group string) map[string]int {
		t.Helper()
		res, err := adm.FetchOffsets(ctx, group)
		if err != nil || res.Error() != nil {
			t.Fatalf("FetchOffsets %s: %v %v", group, err, res.Error())
		}
		out := map[string]int{}
		res.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				out[o.Topic]++
			}
		})
		return out
	}

	// A group with a member subscribed to one topic.
	commit("busy")
	s := &seen{by: map[string][]int{}}
	m := startMember(t, f, 0, "busy", "subscribed", s)
	defer m.stop()
	f.waitGroup(t, "busy", 1)

	res, err := adm.DeleteGroups(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if err := res["busy"].Err; !errors.Is(err, kerr.NonEmptyGroup) {
		t.Fatalf("DeleteGroups of a group with a member: %v, want NON_EMPTY_GROUP", err)
	}
	del, err := adm.DeleteOffsets(ctx, "busy", kadm.TopicsSet{"subscribed": {0: {}, 1: {}}, "other": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if err, _ := del.Lookup("subscribed", p); !errors.Is(err, kerr.GroupSubscribedToTopic) {
			t.Errorf("OffsetDelete of subscribed/%d: %v, want GROUP_SUBSCRIBED_TO_TOPIC", p, err)
		}
		if err, _ := del.Lookup("other", p); err != nil {
			t.Errorf("OffsetDelete of other/%d: %v", p, err)
		}
	}
	if got := committed("busy"); got["other"] != 0 || got["subscribed"] != 2 {
		t.Fatalf("committed offsets of busy after OffsetDelete: %v, want subscribed's 2 alone", got)
	}

	// A group without members loses every committed offset.
	commit("idle")
	if got := committed("idle"); got["other"] != 2 || got["subscribed"] != 2 {
		t.Fatalf("committed offsets of idle: %v", got)
	}
	res, err = adm.DeleteGroups(ctx, "idle")
	if err != nil || res["idle"].Err != nil {
		t.Fatalf("DeleteGroups of an idle group: %v %v", err, res["idle"].Err)
	}
	if got := committed("idle"); len(got) != 0 {
		t.Fatalf("committed offsets of idle after DeleteGroups: %v", got)
	}
	stream, err := f.node.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := f.node.Topic(ctx, stream, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.srv.groups.committedOffset("idle", topicPart{"other", 0}, topic.Revision); ok {
		t.Fatal("the group log still holds an offset of the deleted group")
	}

	// A deleted (or never known) group is GROUP_ID_NOT_FOUND, and so is
	// an OffsetDelete of it.
	res, err = adm.DeleteGroups(ctx, "idle", "never")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"idle", "never"} {
		if err := res[g].Err; !errors.Is(err, kerr.GroupIDNotFound) {
			t.Errorf("DeleteGroups of %s: %v, want GROUP_ID_NOT_FOUND", g, err)
		}
	}
	if _, err := adm.DeleteOffsets(ctx, "never", kadm.TopicsSet{"other": {0: {}}}); !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatalf("OffsetDelete of an unknown group: %v, want GROUP_ID_NOT_FOUND", err)
	}

	// Once its member left, the group can be deleted.
	m.stop()
	res, err = adm.DeleteGroups(ctx, "busy")
	if err != nil || res["busy"].Err != nil {
		t.Fatalf("DeleteGroups after the member left: %v %v", err, res["busy"].Err)
	}
	if got := committed("busy"); len(got) != 0 {
		t.Fatalf("committed offsets of busy after DeleteGroups: %v", got)
	}
}

// TestGroupDeletionHoldsOffJoinsAndCommits: while a DeleteGroups removes
// a group's committed offsets, a join or a commit of the group is asked
// to retry (COORDINATOR_LOAD_IN_PROGRESS) rather than land in the middle
// of the deletion and be removed by it; a second deletion of the group
// meanwhile is asked to retry too. Once it is done, both are served.
func TestGroupDeletionHoldsOffJoinsAndCommits(t *testing.T) {
	c := newCoordinator(DefaultGroupHeartbeatInterval, DefaultGroupSessionTimeout)
	if code, known := c.groupDelete("g"); code != 0 || known {
		t.Fatalf("groupDelete of an unknown group: code %d, known %v", code, known)
	}
	if code := c.commitCheck("g", "", -1); code != kerr.CoordinatorLoadInProgress.Code {
		t.Errorf("commit during the deletion: code %d, want COORDINATOR_LOAD_IN_PROGRESS", code)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.SessionTimeoutMillis, join.ProtocolType = 5, "g", 10_000, "consumer"
	join.Protocols = append(join.Protocols, kmsg.JoinGroupRequestProtocol{Name: "range"})
	if resp, _ := c.join(join, 0, "client", "host", time.Now()); resp.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Errorf("join during the deletion: code %d, want COORDINATOR_LOAD_IN_PROGRESS", resp.ErrorCode)
	}
	if code, _ := c.groupDelete("g"); code != kerr.CoordinatorLoadInProgress.Code {
		t.Errorf("a second deletion meanwhile: code %d, want COORDINATOR_LOAD_IN_PROGRESS", code)
	}
	c.deleted("g")
	if code := c.commitCheck("g", "", -1); code != 0 {
		t.Errorf("commit after the deletion: code %d", code)
	}
	if resp, _ := c.join(join, 0, "client", "host", time.Now()); resp.ErrorCode == kerr.CoordinatorLoadInProgress.Code {
		t.Errorf("join after the deletion still refused")
	}
}
