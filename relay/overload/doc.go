// Package overload owns the relay's memory ceiling, after Envoy's overload
// manager: a budget, two marks on it, and a monitor that samples the heap
// and moves between three states. At the soft mark it sheds what no client
// uses (a Shedder: the registry's lingering classes and shards), oldest
// first; at the refuse mark it refuses what would make the relay hold more
// (Refuse: new streams, new subscriptions); below a mark again, less a
// hysteresis, it leaves that state.
//
// It owns no stream and no class: the relay's servers ask Refuse at their
// admission points, and the registry sheds. It depends only on shard (what a
// shed dropped); the budget's defaults (GOMEMLIMIT, the cgroup limit) are read
// by Detect, called from cmd/.
package overload
