//go:build linux

package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

// mountTmpfs mounts a tmpfs of size bytes at a fresh directory and
// unmounts it when the test ends; it skips the test where mounting is not
// allowed (not root, no CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "full")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): a real full filesystem needs root", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs: %v", err)
		}
	})
	return dir
}

// On a real full filesystem (a small tmpfs), a produce answered
// ErrNoSpace is not in the log: not after the partition recovers in
// place, not after a reopen; every acknowledged one is. Small messages
// are refused by the partition's own write (held behind, then written a
// page at a time); messages over the write-behind buffer reach the
// segment file and are refused by the journal's write, and before the
// group commit took them back, the first such produce on each topic was
// in the log after the rebuild and after a reopen.
func TestNoSpaceOnARealFullFilesystemWasNotAppended(t *testing.T) {
	for _, size := range []int{100, 10000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testNoSpaceOnTmpfs(t, size) })
	}
}

func testNoSpaceOnTmpfs(t *testing.T, size int) {
	mnt := mountTmpfs(t, 8<<20)
	// Ballast: removed to give space back.
	if err := os.WriteFile(filepath.Join(mnt, "ballast"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := parkway.Config{DataDir: filepath.Join(mnt, "data"), Shards: 1}
	n, err := parkway.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var topics []parkway.Topic
	for _, name := range []string{"a", "b"} {
		tp, err := n.Admin().CreateTopic(ctx, s, name, 1)
		if err != nil {
			t.Fatal(err)
		}
		topics = append(topics, tp)
	}
	acked := map[string]bool{}
	refused := map[string]bool{}
	full := make([]int, len(topics))
	pad := make([]byte, size)
	for i := 0; i < 20000 && (full[0] < 3 || full[1] < 3); i++ {
		k := i % len(topics)
		payload := fmt.Sprintf("%d-%d-", k, i)
		_, err := n.Produce(ctx, topics[k], parkway.PartitionID(0), parkway.Message{Payload: append([]byte(payload), pad...)})
		switch {
		case err == nil:
			acked[payload] = true
		case errors.Is(err, parkway.ErrNoSpace):
			refused[payload] = true
			full[k]++
		default:
			full[k]++ // fenced, rebuilding, unknown: neither promised
		}
	}
	if len(refused) == 0 {
		t.Fatalf("no produce was refused with ErrNoSpace (%d acknowledged)", len(acked))
	}
	t.Logf("%d acknowledged, %d refused with ErrNoSpace", len(acked), len(refused))
	if err := os.Remove(filepath.Join(mnt, "ballast")); err != nil {
		t.Fatal(err)
	}
	check := func(n *parkway.Node, when string) {
		t.Helper()
		seen := map[string]bool{}
		for _, tp := range topics {
			var from uint64
			for {
				b, err := n.Poll(ctx, tp, 0, parkway.AtOffset(from), 1000)
				if err != nil {
					if errors.Is(err, parkway.ErrPartitionFailed) || errors.Is(err, parkway.ErrRetry) {
						time.Sleep(50 * time.Millisecond) // real time: a rebuild behind its backoff
						continue
					}
					t.Fatalf("%s: poll: %v", when, err)
				}
				if len(b.Messages) == 0 {
					break
				}
				for _, m := range b.Messages {
					p := string(m.Payload[:len(m.Payload)-len(pad)])
					if refused[p] {
						t.Errorf("%s: %q was answered ErrNoSpace, yet it is in the log at offset %d", when, p, m.Offset)
					}
					seen[p] = true
				}
				from = b.Next
			}
		}
		for p := range acked {
			if !seen[p] {
				t.Errorf("%s: acknowledged %q is missing", when, p)
			}
		}
	}
	check(n, "after recovery")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, err := parkway.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n2.Close() }()
	check(n2, "after reopen")
}
