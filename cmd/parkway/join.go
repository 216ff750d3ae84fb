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
// change is applied here, or fails; the joiner calls again after a failure
// (adding a member twice is a no-op).
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
func parseJoinVia(s string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		hostport := strings.TrimPrefix(v, "http://")
		if _, _, err := net.SplitHostPort(hostport); err != nil || strings.Contains(hostport, "/") {
			return nil, usageErr("serve: --join-via entry %q: want host:port (a member's --http address)", v)
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
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
