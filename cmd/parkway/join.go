package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/transport"
)

// Joining a running cluster from the command line. The library's
// membership change is Cluster.AddNode on a member, after every member's bus
// admits the new node's address (TCPBus.AddPeer); a member started with
// --admin offers both over its HTTP listener, and a node started with
// --join calls them (joinCluster).

// adminAPI serves the membership calls of a member started with --admin.
type adminAPI struct {
	node *parkway.Node
	bus  *transport.TCPBus
	log  hclog.Logger
}

// addNodeTimeout bounds one /admin/nodes call: AddNode returns once the
// node's promotion from learner to voter is applied here, or fails; the
// joiner calls again after a failure (adding a member twice is a no-op,
// and a call for a learner waits for its promotion).
const addNodeTimeout = time.Minute

// addPeer admits a node's address to this member's bus: POST
// /admin/peers with form values id and addr (host:port).
func (a *adminAPI) addPeer(w http.ResponseWriter, r *http.Request) {
	id, ok := formID(w, r)
	if !ok {
		return
	}
	addr := r.FormValue("addr")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		http.Error(w, fmt.Sprintf("addr %q: %v", addr, err), http.StatusBadRequest)
		return
	}
	if err := a.bus.AddPeer(id, addr); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a.log.Info("peer admitted", "node_id", id, "addr", addr, "from", r.RemoteAddr)
	fmt.Fprintln(w, "ok")
}

// addNode adds a node to the cluster (Cluster.AddNode): POST /admin/nodes
// with form value id. 200 once this member applied the change; 503 with
// the error when it could not be done now (retry); 400 for a request the
// cluster refuses.
func (a *adminAPI) addNode(w http.ResponseWriter, r *http.Request) {
	id, ok := formID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), addNodeTimeout)
	defer cancel()
	if err := a.node.Cluster().AddNode(ctx, id); err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, parkway.ErrInvalidNode) {
			code = http.StatusBadRequest
		}
		http.Error(w, err.Error(), code)
		return
	}
	a.log.Info("node added", "node_id", id, "from", r.RemoteAddr)
	fmt.Fprintln(w, "ok")
}

// removeNodeTimeout bounds one DELETE /admin/nodes/{id} call on the
// member's side: RemoveNode moves the node's replicas first, which takes
// as long as the data takes; a call cut short is made again and carries
// on from where the cluster stands.
const removeNodeTimeout = 10 * time.Minute

// removeNode removes a node from the cluster (Cluster.RemoveNode), then
// from this member's bus (TCPBus.RemovePeer): DELETE /admin/nodes/{id}.
// 200 once this member applied the removal; 400 for a node this member
// cannot remove (itself: ask another member); 409 when a topic's
// replication factor needs the node; 503 with the error when it could
// not be done now (call again).
func (a *adminAPI) removeNode(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), removeNodeTimeout)
	defer cancel()
	if err := a.node.Cluster().RemoveNode(ctx, id); err != nil {
		code := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, parkway.ErrInvalidNode):
			code = http.StatusBadRequest
		case errors.Is(err, parkway.ErrNotEnoughNodes):
			code = http.StatusConflict
		}
		http.Error(w, err.Error(), code)
		return
	}
	if err := a.bus.RemovePeer(id); err != nil {
		http.Error(w, "removed from the cluster, but not from this member's bus: "+err.Error(), http.StatusInternalServerError)
		return
	}
	a.log.Info("node removed", "node_id", id, "from", r.RemoteAddr)
	fmt.Fprintln(w, "ok")
}

// removePeer takes a removed node off this member's bus
// (TCPBus.RemovePeer): DELETE /admin/peers/{id}. Every remaining member
// does it after the removal, as every member admitted the node before it
// was added.
func (a *adminAPI) removePeer(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if err := a.bus.RemovePeer(id); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a.log.Info("peer removed", "node_id", id, "from", r.RemoteAddr)
	fmt.Fprintln(w, "ok")
}

// pathID reads the path value id, a non-zero node id; it answers 400
// itself when there is none.
func pathID(w http.ResponseWriter, r *http.Request) (transport.NodeID, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		http.Error(w, fmt.Sprintf("id %q: want a non-zero node id", r.PathValue("id")), http.StatusBadRequest)
		return 0, false
	}
	return transport.NodeID(id), true
}

// formID reads the form value id, a non-zero node id; it answers 400
// itself when there is none.
func formID(w http.ResponseWriter, r *http.Request) (transport.NodeID, bool) {
	id, err := strconv.ParseUint(r.FormValue("id"), 10, 64)
	if err != nil || id == 0 {
		http.Error(w, fmt.Sprintf("id %q: want a non-zero node id", r.FormValue("id")), http.StatusBadRequest)
		return 0, false
	}
	return transport.NodeID(id), true
}

// parseJoinVia parses --join-via: host:port,… (an http:// prefix is
// allowed) into base URLs.
func parseJoinVia(s string) ([]string, error) { return parseVia("serve: --join-via", s) }

// parseVia parses a list of members' --http addresses, host:port,… (an
// http:// prefix is allowed), into base URLs; what names the flag in a
// usage error.
func parseVia(what, s string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		hostport := strings.TrimPrefix(v, "http://")
		if _, _, err := net.SplitHostPort(hostport); err != nil || strings.Contains(hostport, "/") {
			return nil, usageErr("%s entry %q: want host:port (a member's --http address)", what, v)
		}
		out = append(out, "http://"+hostport)
	}
	return out, nil
}

// joinCluster asks the members at via (their --http base URLs) to admit
// this node's address, then one of them to add it, until one has added it
// or ctx ends. Every member must admit the address (a member whose bus
// does not know it refuses its frames), so a member that cannot be
// reached is asked again on the next round.
func joinCluster(ctx context.Context, self transport.NodeID, addr string, via []string, log hclog.Logger) {
	client := &http.Client{Timeout: addNodeTimeout + 10*time.Second}
	admitted := make([]bool, len(via))
	bo := backoff.New(100*time.Millisecond, 5*time.Second)
	for round := 1; ; round++ {
		all := true
		for i, base := range via {
			if admitted[i] {
				continue
			}
			if err := post(ctx, client, base+"/admin/peers", url.Values{"id": {fmt.Sprint(self)}, "addr": {addr}}); err != nil {
				log.Warn("a member did not admit this node's address; asking again", "member", base, "error", err, "round", round)
				all = false
				continue
			}
			admitted[i] = true
		}
		if all {
			for _, base := range via {
				err := post(ctx, client, base+"/admin/nodes", url.Values{"id": {fmt.Sprint(self)}})
				if err == nil {
					log.Info("joined the cluster", "via", base)
					return
				}
				log.Warn("a member did not add this node; trying the next", "member", base, "error", err, "round", round)
			}
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			log.Warn("stopped before joining the cluster")
			return
		case <-t.C:
		}
	}
}

// post sends form values and wants 200.
func post(ctx context.Context, client *http.Client, u string, form url.Values) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(client, req)
}

// httpStatusError is an answer other than 200.
type httpStatusError struct {
	code int
	msg  string
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.msg)
}

// do sends req and wants 200; another answer is an *httpStatusError.
func do(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return &httpStatusError{code: resp.StatusCode, msg: strings.TrimSpace(string(body))}
	}
	return nil
}
