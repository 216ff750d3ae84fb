package parkway_test

import (
	"reflect"
	"slices"
	"testing"

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
			"Admin", "Close", "Cluster", "JoinGroup", "Metrics", "NewConsumer", "Poll",
			"Produce", "ProduceAsync", "ProduceAsyncIdempotent", "Ready", "Stream", "Topic",
		}},
		{reflect.TypeFor[*parkway.Admin](), []string{
			"ConsumerOffset", "CreateGroup", "CreatePartitions", "CreateStream", "CreateTopic",
			"DeleteGroup", "DeletePartitions", "DeleteStream", "DeleteTopic", "Group",
			"PartitionOffsets", "Partitions", "PurgeTopic", "SetTopicConfig", "Shards",
			"StoreOffset", "Streams", "TopicInfo", "Topics", "TruncatePartition",
		}},
		{reflect.TypeFor[*parkway.Cluster](), []string{"AddNode", "Leader", "Rebalance", "RemoveNode", "State"}},
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
