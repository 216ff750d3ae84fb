package host

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// A call's reply channel and request may be used again (CallReusing's
// reusable) only when the call ended with its one send's answer taken:
// not after a retry, a refused send, or the caller giving up before the
// answer — which the shard then still sends, onto the channel a reuse
// would have handed to the next call.
func TestCallReusableOnlyAfterItsOneAnswer(t *testing.T) {
	retry := fmt.Errorf("%w: test", shard.ErrRetry)
	for _, tc := range []struct {
		name     string
		shard    func(n int) (r shard.Response, after time.Duration, ok bool, refused error)
		cancel   time.Duration
		reusable bool
	}{
		{"answered at once", func(int) (shard.Response, time.Duration, bool, error) {
			return shard.Response{Offset: 7}, 0, true, nil
		}, 0, true},
		{"answered later", func(int) (shard.Response, time.Duration, bool, error) {
			return shard.Response{Offset: 7}, 5 * time.Millisecond, true, nil
		}, 0, true},
		{"retried, then answered", func(n int) (shard.Response, time.Duration, bool, error) {
			if n == 1 {
				return shard.Response{Err: retry}, 0, true, nil
			}
			return shard.Response{Offset: 7}, 0, true, nil
		}, 0, false},
		{"refused, then answered", func(n int) (shard.Response, time.Duration, bool, error) {
			if n == 1 {
				return shard.Response{}, 0, false, router.ErrFull
			}
			return shard.Response{Offset: 7}, 0, true, nil
		}, 0, false},
		{"given up before the answer", func(int) (shard.Response, time.Duration, bool, error) {
			return shard.Response{Offset: 7}, 50 * time.Millisecond, true, nil
		}, 10 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, net := callEngine(t, clock.Real{})
				defer net.Close()
				defer e.Close()
				p := newFwdPeer(t, clock.Real{}, e, net, func() func(*testing.T, *fwdPeer, transport.Message) {
					return func(*testing.T, *fwdPeer, transport.Message) {}
				})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.cancel > 0 {
					time.AfterFunc(tc.cancel, cancel)
				}
				reply := make(chan shard.Response, 1)
				req := &shard.Request{Op: shard.OpProduce, NS: metadata.Namespace(1 << 20), Messages: []partition.Message{{Payload: []byte("m")}}}
				pc := e.startCall(ctx, req, &scriptShard{p: p, answer: tc.shard}, reply)
				resolve := func(context.Context) (metadata.Namespace, uint64, error) { return req.NS, 1, nil }
				reusable, _ := pc.wait(ctx, resolve, new(shard.Response))
				if reusable != tc.reusable {
					t.Fatalf("reusable %v, want %v (log %q)", reusable, tc.reusable, p.log)
				}
				time.Sleep(time.Second) // every answer the script sends is sent
				synctest.Wait()
				p.deliver()
				if reusable && len(reply) != 0 {
					t.Fatalf("a reusable call's channel holds %d answers", len(reply))
				}
				if tc.cancel > 0 && len(reply) != 1 {
					t.Fatalf("the call given up: %d late answers on its channel, want the shard's 1", len(reply))
				}
			})
		})
	}
}
