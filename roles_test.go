package parkway_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
)

// TestAPIByRole pins the root API's shape (issue 29): the Node is the
// data API, administration is on Admin and cluster operations on Cluster.
// A method added to the wrong type, or a call moved back, fails here; a
// new method belongs in one of the lists, by role.
func TestAPIByRole(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[*parkway.Node](), []string{
			"Admin", "Close", "Cluster", "CreateTopicAndProduce", "JoinGroup", "KeepsEncoded", "Logger", "Metrics", "NewConsumer", "Poll", "PollEncoded",
			"Produce", "ProduceAsync", "ProduceAsyncEncoded", "ProduceAsyncGive", "ProduceAsyncIdempotent", "Ready", "Stream", "Topic",
		}},
		{reflect.TypeFor[*parkway.Admin](), []string{
			"ConsumerOffset", "CreateGroup", "CreatePartitions", "CreateStream", "CreateTopic",
			"DeleteConsumer", "DeleteConsumerOffset", "DeleteGroup", "DeletePartitions", "DeleteStream", "DeleteTopic", "Group",
			"PartitionOffsets", "Partitions", "PurgeTopic", "SetTopicConfig", "Shards",
			"StoreOffset", "Streams", "TopicInfo", "Topics", "TruncatePartition",
		}},
		{reflect.TypeFor[*parkway.Cluster](), []string{"AddNode", "InSyncReplicas", "Leader", "LeaderTerm", "ProduceInTerm", "Rebalance", "RemoveNode", "State"}},
	} {
		var got []string
		for i := range c.typ.NumMethod() {
			got = append(got, c.typ.Method(i).Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v has methods %v, want %v", c.typ, got, c.want)
		}
	}
}

// TestClusterCallsOnSingleNode: every call of the cluster API on a node
// opened without Config.Cluster answers ErrInvalidArgument. AddNode,
// RemoveNode and Rebalance answered an error with no sentinel ("not a
// cluster node") before the role type had one guard for all five.
func TestClusterCallsOnSingleNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
		c := n.Cluster()
		_, leaderErr := c.Leader(ctx, tp, 0)
		_, stateErr := c.State(ctx)
		_, _, termErr := c.LeaderTerm(ctx, tp, 0)
		_, produceErr := c.ProduceInTerm(ctx, tp, 0, 1, parkway.Message{Payload: []byte("x")})
		_, _, isrErr := c.InSyncReplicas(ctx, tp, 0)
		for what, err := range map[string]error{
			"AddNode": c.AddNode(ctx, 2), "RemoveNode": c.RemoveNode(ctx, 2), "Rebalance": c.Rebalance(ctx),
			"Leader": leaderErr, "LeaderTerm": termErr, "State": stateErr,
			"ProduceInTerm": produceErr, "InSyncReplicas": isrErr,
		} {
			if !errors.Is(err, parkway.ErrInvalidArgument) {
				t.Errorf("%s on a single node: %v, want ErrInvalidArgument", what, err)
			}
		}
	})
}
