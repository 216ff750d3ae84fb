//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func dumpLines(t *testing.T, out string) []dumpedMessage {
	t.Helper()
	var msgs []dumpedMessage
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m dumpedMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func TestDump(t *testing.T) {
	dir := makeDir(t, 50)
	before := checksum(t, dir)
	r := runBin(t, "dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "1")
	if r.code != 0 {
		t.Fatalf("dump:\n%v", r)
	}
	msgs := dumpLines(t, r.stdout)
	if len(msgs) != 50 {
		t.Fatalf("dump printed %d messages, want 50:\n%s", len(msgs), r.stdout)
	}
	for i, m := range msgs {
		if m.Offset != uint64(i) || m.Key == nil || *m.Key != fmt.Sprintf("key-%d", i) || m.Timestamp == "" || m.AppendTime == "" {
			t.Fatalf("message %d: %+v", i, m)
		}
		switch {
		case i%5 == 4:
			if m.Payload != nil || m.PayloadBase64 == "" {
				t.Fatalf("binary payload of message %d not in base64: %+v", i, m)
			}
		case m.Payload == nil || *m.Payload != fmt.Sprintf("order %d of partition 1", i):
			t.Fatalf("payload of message %d: %+v", i, m)
		}
		if (i%3 == 1) != (len(m.Headers) == 1) || (i%3 == 1 && (m.Headers[0].Key != "h" || *m.Headers[0].Value != "v")) {
			t.Fatalf("headers of message %d: %+v", i, m.Headers)
		}
	}
	// By id, with a window.
	r = runBin(t, "dump", "--stream", "0", "--topic", "0", "--partition", "0", "--from", "10", "--count", "3", dir)
	if msgs := dumpLines(t, r.stdout); r.code != 0 || len(msgs) != 3 || msgs[0].Offset != 10 || msgs[2].Offset != 12 {
		t.Fatalf("dump --from 10 --count 3:\n%v", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream", "nope", "--topic", "orders", "--partition", "0"}, `no stream "nope"`},
		{[]string{"--stream", "shop", "--topic", "nope", "--partition", "0"}, `no topic "nope"`},
		{[]string{"--stream", "shop", "--topic", "orders", "--partition", "2"}, "no partition 2"},
		{[]string{"--stream", "shop", "--topic", "orders", "--partition", "0", "--from", "51"}, "outside the partition's log"},
		{[]string{"--stream", "shop", "--topic", "orders"}, "are required"},
	} {
		r := runBin(t, append([]string{"dump", dir}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dump %v: want exit 2 and %q\n%v", c.args, c.want, r)
		}
	}
	if checksum(t, dir) != before {
		t.Fatal("dump changed the directory")
	}
}

// TestDumpDamaged: the messages before the damage are printed, then the
// damage is named and the exit code is 1.
func TestDumpDamaged(t *testing.T) {
	dir := copyDir(t, makeDir(t, 30000))
	flip(t, segments(t, dir, 0)[0], 5000)
	before := checksum(t, dir)
	r := runBin(t, "dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "0")
	msgs := dumpLines(t, r.stdout)
	if r.code != exitProblems || len(msgs) == 0 || !strings.Contains(r.stderr, "00000000000000000000.log at byte") {
		t.Fatalf("dump of a damaged partition: want exit 1, the messages before the damage and its place\n%s", r.stderr)
	}
	if checksum(t, dir) != before {
		t.Fatal("dump changed the directory")
	}
}
