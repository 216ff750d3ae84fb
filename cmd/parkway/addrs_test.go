package main

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// freeAddrs returns n loopback addresses for the processes a test starts
// and restarts.
//
// A port the kernel hands out for port 0 and the test releases is free
// only until the next bind of port 0 anywhere on the machine, which may
// return it: the test packages `go test ./...` runs at once bind
// hundreds, and one of them took a member's Kafka port between the pick
// and the member's bind ("address already in use"). A killed member is
// restarted on its old ports seconds later, which widens the window. So
// the ports come from below the kernel's ephemeral range, which a bind
// of port 0 never returns, chosen at random and checked free when
// chosen; only another test that picks fixed ports the same way could
// collide.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 1000 {
		// An unusual range leaves no room below it: take the kernel's
		// ports and the (rare) race with them.
		return kernelAddrs(t, n)
	}
	var out []string
	seen := map[int]bool{}
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no free loopback port below %d after %d tries", hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		ln.Close()
		out = append(out, addr)
	}
	return out
}

// ephemeralLow is the first port of the kernel's range for port 0
// (Linux's ip_local_port_range; 32768, its default, where it cannot be
// read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// kernelAddrs returns n addresses the kernel chose for port 0, released.
func kernelAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}
