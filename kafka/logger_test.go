package kafka

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/parkway-io/parkway"
)

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent
// writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServerLogsThroughNodeLogger: a listener given no Logger logs
// through its node's (Node.Logger), under the name "kafka".
func TestServerLogsThroughNodeLogger(t *testing.T) {
	var out lockedBuffer
	node, err := parkway.Open(parkway.Config{Shards: 1, Logger: hclog.New(&hclog.LoggerOptions{Name: "node", Level: hclog.Info, Output: &out})})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	l := listen(t, node, Config{})
	defer l.stop()
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.addr), kgo.DefaultProduceTopic("logged"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctxFor(t), kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "node.kafka: auto-created topic") {
		t.Fatalf("the node's logger has no line of the listener's auto-creation:\n%s", got)
	}
}
