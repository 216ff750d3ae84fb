package transport

// ClusterID is the cluster id of the bus's TLS identity ("" on a
// plaintext bus): the cluster a node's data directory is recorded for
// when its configuration names none (see host.Cluster.ClusterID).
func (b *TCPBus) ClusterID() string {
	if b.opts.TLS == nil {
		return ""
	}
	return b.opts.TLS.ClusterID
}
