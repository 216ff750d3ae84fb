package shard

import "context"

// ParkedNamespaces lists the parked namespaces in namespace order, read on
// the pump: the part of Inspect a sweep needs, at a cost in the number of
// parked namespaces rather than owned partitions (a reconciler converging
// one changed topic must not pay for the ten thousand that did not change).
func (s *Shard) ParkedNamespaces(ctx context.Context) ([]ParkedNamespace, error) {
	var out []ParkedNamespace
	if err := s.do(ctx, newControl(func(s *Shard) error {
		s.park.order.Ascend(func(q *parkQueue) bool {
			out = append(out, ParkedNamespace{
				NS: q.ns, Frames: q.len(), Bytes: q.bytes,
				OldestPasses: int(s.pass - q.frames[q.head].pass),
			})
			return true
		})
		return nil
	}, nil)); err != nil {
		return nil, err
	}
	return out, nil
}
