package upstream

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"go.uber.org/zap"
)

// DefaultResolveInterval is how often, by default, an affinity tier's
// address is resolved again for its members (Config.ResolveInterval,
// upstream.resolve_interval).
const DefaultResolveInterval = 30 * time.Second

// resolveMembers resolves Config.Address's host to the tier's members
// (upstream.affinity: class without upstream.members: a Kubernetes headless
// Service has one A record per pod), each with Address's port. A failed
// resolution keeps the members there are, warned; one that succeeds
// replaces them (members.go moves the classes of those gone).
func (c *Client) resolveMembers() {
	host, port, err := net.SplitHostPort(c.cfg.Address)
	if err != nil {
		c.log.Warn("upstream members: upstream.address is not HOST:PORT", zap.Error(err), zap.String("key", "upstream.address"))
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ConnectTimeout)
	defer cancel()
	ips, err := c.cfg.LookupHost(ctx, host)
	if err == nil && len(ips) == 0 {
		err = errNoAddresses
	}
	if err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("upstream members: resolving upstream.address failed; keeping the members there are",
				zap.String("host", host), zap.Error(err), zap.String("key", "upstream.resolve_interval"))
		}
		return
	}
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, port))
	}
	slices.Sort(addrs)
	if err := c.members.set(slices.Compact(addrs)); err != nil && c.ctx.Err() == nil {
		c.log.Warn("upstream members: some cannot be dialed", zap.Error(err))
	}
}

var errNoAddresses = errors.New("no addresses")

// runResolver resolves the members again every ResolveInterval, until the
// client closes.
func (c *Client) runResolver() {
	t := time.NewTicker(c.cfg.ResolveInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.resolveMembers()
		}
	}
}
