package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
)

const removeUsage = `usage: parkway remove-node --via HOST:PORT,… [flags] ID

Removes node ID from a running cluster, through its members' HTTP
listeners (--http of members started with --admin), as Cluster.RemoveNode
does: every replica the node holds first moves to the other nodes (a new
replica is added and caught up before the old one goes), then the node
leaves the metadata group. It asks the members in --via in turn until one
has removed the node (a member cannot remove itself: name others too),
then every member in --via to take the node off its bus, so its
connections close and its frames are refused. The removed node serves
nothing more and can be stopped (it may be down already, as long as each
of its groups keeps a quorum without it). Moving the data takes as long
as it takes: an interrupted removal carries on when run again.

Exit codes: 0 removed; 1 the removal failed or did not finish within
--timeout (run it again: it carries on), or a member did not take the
node off its bus; 2 usage error, or the cluster refuses the removal (a
topic's replication factor needs the node).
`

func runRemoveNode(args []string, stdout, stderr io.Writer) error {
	f := newFlags("remove-node", removeUsage, stderr)
	via := f.String("via", "", "the HTTP addresses (host:port,…) of members running with --admin")
	timeout := f.Duration("timeout", 30*time.Minute, "give up after this long (the removal carries on when run again)")
	pos, err := f.parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("remove-node: one node id expected, got %d arguments", len(pos))
	}
	id, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil || id == 0 {
		return usageErr("remove-node: node id %q: want a non-zero integer", pos[0])
	}
	if *via == "" {
		return usageErr("remove-node: --via is required (the --http addresses of members running with --admin)")
	}
	members, err := parseVia("remove-node: --via", *via)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	client := &http.Client{Timeout: removeNodeTimeout + 10*time.Second}
	send := func(u string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u, nil)
		if err != nil {
			return err
		}
		return do(client, req)
	}

	// One member removes it; a refusal for the cluster's reasons is final,
	// one for the member's (itself, busy, unreachable) tries the next.
	bo := backoff.New(200*time.Millisecond, 10*time.Second)
	removedBy := ""
	for removedBy == "" {
		for _, base := range members {
			err := send(fmt.Sprintf("%s/admin/nodes/%d", base, id))
			var he *httpStatusError
			switch {
			case err == nil:
				removedBy = base
			case errors.As(err, &he) && he.code == http.StatusConflict:
				return usageErr("remove-node: the cluster refuses to remove node %d: %s", id, he.msg)
			default:
				fmt.Fprintf(stderr, "parkway: remove-node: %s did not remove node %d: %v\n", base, id, err)
			}
			if removedBy != "" || ctx.Err() != nil {
				break
			}
		}
		if removedBy != "" {
			break
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return problemsErr(fmt.Errorf("remove-node: node %d not removed within %v; run it again to carry on", id, *timeout))
		case <-t.C:
		}
	}
	fmt.Fprintf(stdout, "node %d removed from the cluster (through %s)\n", id, removedBy)

	// Every member takes it off its bus (the remover did already).
	var failed []error
	for _, base := range members {
		if base == removedBy {
			continue
		}
		if err := send(fmt.Sprintf("%s/admin/peers/%d", base, id)); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", base, err))
		}
	}
	if len(failed) > 0 {
		return problemsErr(fmt.Errorf("remove-node: node %d is removed, but these members did not take it off their bus (run again, or restart them without it in --peers): %w", id, errors.Join(failed...)))
	}
	fmt.Fprintf(stdout, "node %d taken off the bus of %d member(s)\n", id, len(members))
	return nil
}
