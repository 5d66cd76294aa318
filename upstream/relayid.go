package upstream

import (
	"net"
	"os"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// relaySelf is what a default node id says about the relay itself.
type relaySelf struct {
	host string // os.Hostname (the pod name), or "unknown"
	ip   string // the relay's own address, or 127.0.0.1
}

func lookupSelf() relaySelf {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return relaySelf{host: host, ip: localIP()}
}

// relayID is a node id of four parts, TYPE~IP~ID~DOMAIN, as istiod requires
// (it refuses any other with "missing parts in the service node"; TYPE must
// be sidecar or router, IP a valid address unless the metadata carries
// INSTANCE_IPS), and as control planes keying on Istio's shape expect. ID
// is "xds-relay-HOSTNAME" and IP the relay's own: the stream speaks for
// many nodes, and must not pass for one of them. When the class's first
// node id has Istio's shape, its TYPE and DOMAIN are kept (istiod derives
// the namespace from DOMAIN when the metadata has no NAMESPACE); otherwise
// TYPE is sidecar and DOMAIN NAMESPACE.svc.cluster.local (metadata
// NAMESPACE, else "default").
func (r relaySelf) relayID(first *corev3.Node) string {
	typ, domain := "sidecar", ""
	if parts := strings.Split(first.GetId(), "~"); len(parts) == 4 && parts[0] != "" {
		typ, domain = parts[0], parts[3]
	} else {
		ns := first.GetMetadata().GetFields()["NAMESPACE"].GetStringValue()
		if ns == "" || strings.Contains(ns, "~") {
			ns = "default"
		}
		domain = ns + ".svc.cluster.local"
	}
	return strings.Join([]string{typ, r.ip, "xds-relay-" + r.host, domain}, "~")
}

// localIP is the relay's first global unicast address, IPv4 first (in
// Kubernetes the pod IP), else 127.0.0.1.
func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || !ipn.IP.IsGlobalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
		if v6 == "" {
			v6 = ipn.IP.String()
		}
	}
	if v6 != "" {
		return v6
	}
	return "127.0.0.1"
}
