//go:build unix

package main

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy forwards the TCP connections it accepts to target: the
// link one member dials to reach another. A parkway member sends to a
// peer only on the connection it dialed, so a proxy carries one direction
// of one link, and blocking it is a one-way partition. While blocked it
// closes the connections it forwarded and holds new ones open without
// forwarding a byte (a black hole: the dialer's handshake times out, as
// across a partition, rather than being refused at once).
type faultProxy struct {
	ln        net.Listener
	target    string
	wg        sync.WaitGroup
	forwarded atomic.Int64 // connections forwarded: the link is in use

	mu      sync.Mutex
	blocked bool
	closed  bool
	conns   map[net.Conn]struct{}
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

// track adds c to the open connections; false if the proxy closed.
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			continue // held, silent, until unblock or close closes it
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *faultProxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(u) {
		u.Close()
		return
	}
	defer p.untrack(u)
	p.forwarded.Add(1)
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
	// One direction ended: close both so the other copy ends too.
	c.Close()
	u.Close()
	<-done
}

// closeConns closes every open connection.
func (p *faultProxy) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *faultProxy) block() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
	p.closeConns()
}

// unblock heals the link: the held connections are closed, so the dialer
// dials again and is forwarded.
func (p *faultProxy) unblock() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
	p.closeConns()
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.closeConns()
	p.wg.Wait()
}
