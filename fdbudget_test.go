package parkway_test

import (
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
)

// streamsFS counts the descriptors held under prefix (the partition
// store's tree): files from OpenFile to Close, directories for the
// duration of ReadDir, SyncDir and RemoveAll. It records the most held at
// once.
type streamsFS struct {
	vfs.FS
	prefix string
	mu     sync.Mutex
	open   int
	most   int
}

func (c *streamsFS) hold(path string) bool {
	if !strings.HasPrefix(path, c.prefix) {
		return false
	}
	c.mu.Lock()
	c.open++
	c.most = max(c.most, c.open)
	c.mu.Unlock()
	return true
}

func (c *streamsFS) drop() {
	c.mu.Lock()
	c.open--
	c.mu.Unlock()
}

func (c *streamsFS) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

type streamsFile struct {
	vfs.File
	c    *streamsFS
	once sync.Once
}

func (f *streamsFile) Close() error {
	f.once.Do(f.c.drop)
	return f.File.Close()
}

func (c *streamsFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !c.hold(name) {
		return f, err
	}
	return &streamsFile{File: f, c: c}, nil
}

func (c *streamsFS) ReadDir(dir string) ([]string, error) {
	if c.hold(dir) {
		defer c.drop()
	}
	return c.FS.ReadDir(dir)
}

func (c *streamsFS) SyncDir(dir string) error {
	if c.hold(dir) {
		defer c.drop()
	}
	return c.FS.SyncDir(dir)
}

func (c *streamsFS) RemoveAll(name string) error {
	if c.hold(name) {
		defer c.drop()
	}
	return c.FS.RemoveAll(name)
}

// TestMaxOpenFiles runs a node with a descriptor budget of 8 over 60
// partitions: every partition takes a produce and serves it, before and
// after a restart, while the partition store never holds more than 8
// descriptors at once.
func TestMaxOpenFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget, parts = 8, 60
		fsys := &streamsFS{FS: vfs.NewMem(), prefix: "/data/streams"}
		cfg := parkway.Config{DataDir: "/data", FS: fsys, Shards: 2, MaxOpenFiles: budget}
		n := open(t, cfg)
		tp, err := n.Admin().CreateTopic(ctxFor(t), mustStream(t, n, "s"), "t", parts)
		if err != nil {
			t.Fatal(err)
		}
		for p := range uint32(parts) {
			if _, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(p), parkway.Message{Payload: []byte{byte(p)}}); err != nil {
				t.Fatalf("produce to %d: %v", p, err)
			}
		}
		check := func(n *parkway.Node) {
			t.Helper()
			for p := range uint32(parts) {
				b, err := n.Poll(ctxFor(t), tp, p, parkway.AtOffset(0), 10)
				if err != nil || len(b.Messages) != 1 || b.Messages[0].Payload[0] != byte(p) {
					t.Fatalf("poll of partition %d: %v, %d messages", p, err, len(b.Messages))
				}
			}
			if most := fsys.held(); most > budget {
				t.Fatalf("the partition store held %d descriptors at once, budget %d", most, budget)
			}
		}
		check(n)
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		check(open(t, cfg))
	})
}
