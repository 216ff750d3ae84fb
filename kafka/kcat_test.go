package kafka

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestKcatInterop drives the listener with kcat (librdkafka, a C client
// independent of franz-go): it produces keyed records with headers,
// consumes them back as a consumer group (whose commit lands in the
// group log) and lists the metadata. Without kcat the test is
// skipped and says why; under CI (CI=true), where .ci/run installs it,
// its absence fails.
func TestKcatInterop(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat is not installed; .ci/run installs it (Debian package kcat)")
		}
		t.Skip("kcat (librdkafka's command-line client) is not installed: apt-get install kcat")
	}
	f := serve(t, Config{})
	run := func(stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctxFor(t), testTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-b", f.addr}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("kcat %v: %v\n%s", args, err, errOut.Bytes())
		}
		return out.String()
	}
	run("k1:hello\nk2:world\n", "-P", "-t", "kc", "-K:", "-H", "source=kcat", "-z", "snappy")
	got := run("", "-G", "kcgroup", "-o", "beginning", "-e", "-f", "%o %k=%s %h\n", "kc")
	want := "0 k1=hello source=kcat\n1 k2=world source=kcat\n"
	if got != want {
		t.Fatalf("kcat consumed %q, want %q", got, want)
	}
	md := run("", "-L", "-t", "kc")
	if !strings.Contains(md, `topic "kc" with 1 partitions`) || !strings.Contains(md, "partition 0, leader 0") {
		t.Fatalf("kcat -L:\n%s", md)
	}
	h, err := f.srv.topics.lookup(ctxFor(t), "kc")
	if err != nil {
		t.Fatal(err)
	}
	off, ok := f.srv.groups.committedOffset("kcgroup", topicPart{"kc", 0}, h.Revision)
	if !ok || off != 2 {
		t.Fatalf("group kcgroup's committed offset in the group log: %d %v, want 2", off, ok)
	}
	// kcat's records may come in a batch each, and a poll ends at the end
	// of the batch it starts in: read on.
	if msgs := pollAll(t, f.node, h, 0); len(msgs) != 2 || string(msgs[0].Key) != "k1" || msgs[0].Headers[0].Key != "source" {
		t.Fatalf("parkway holds %v", msgs)
	}
}
