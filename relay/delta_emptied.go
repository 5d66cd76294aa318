package relay

import (
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// ClusterLoadAssignment's endpoint fields: endpoints and named_endpoints.
const claEndpoints, claNamedEndpoints = 2, 5

// emptiedAssignment reports whether r is a ClusterLoadAssignment with no
// endpoints at all (neither localities nor named endpoints). istiod's delta
// EDS never removes an assignment: when a service goes it removes the
// Cluster and sends its assignment emptied, so a client holding the
// emptied assignment is owed no removal that could follow the Cluster's.
// Undecodable bytes are not emptied.
func emptiedAssignment(r *shard.Resource) bool {
	_, value, err := wire.AnyFields(r.Any)
	if err != nil {
		return false
	}
	has, err := wire.HasBytesField(value, claEndpoints, claNamedEndpoints)
	return err == nil && !has
}

// heldEmptied reports whether the client holds the child name as an
// emptied ClusterLoadAssignment (the version its base lists, not
// overridden).
func (d *deltaTypeSub) heldEmptied(name string) bool {
	if d.typeURL != xdstype.Endpoint.URL || d.base == nil {
		return false
	}
	if _, over := d.over[name]; over {
		return false
	}
	r, ok := d.base.Lookup(name)
	return ok && emptiedAssignment(r)
}
