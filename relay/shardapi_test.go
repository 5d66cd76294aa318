package relay

import "github.com/xds-relay/xds-relay/shard"

// applyDelta installs an incremental update of typeURL into c, as a delta
// upstream does: updated merged, removed deleted (absence known).
func applyDelta(c *shard.Class, typeURL string, updated []*shard.Resource, removed []string) {
	c.ApplyUpdate(typeURL, shard.Update{Kind: shard.UpdateIncremental, Resources: updated, Removed: removed})
}
