package xdstype

import (
	"slices"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/envoy/annotations"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// Every descriptor agrees with itself and with the protos: its URL names its
// message, its label is the message's name, its service is annotated as
// serving that message, its REST path is the service's Fetch method's, and
// the message has its name where package wire reads it.
func TestDescriptorsAgreeWithTheProtos(t *testing.T) {
	seen := map[string]string{}
	unique := func(kind, v, typ string) {
		t.Helper()
		if v == "" {
			return
		}
		if prev, dup := seen[kind+" "+v]; dup {
			t.Errorf("%s and %s share the %s %q", prev, typ, kind, v)
		}
		seen[kind+" "+v] = typ
	}
	for _, typ := range All() {
		t.Run(typ.Label, func(t *testing.T) {
			md := typ.Message.Descriptor()
			if want := URLPrefix + string(md.FullName()); typ.URL != want {
				t.Errorf("URL %q, message %s: want %q", typ.URL, md.FullName(), want)
			}
			if typ.Label != string(md.Name()) {
				t.Errorf("Label %q, want the message's name %q", typ.Label, md.Name())
			}
			if f := md.Fields().ByNumber(1); f == nil || f.Kind() != protoreflect.StringKind || f.IsList() ||
				(f.Name() != "name" && f.Name() != "cluster_name") {
				t.Errorf("field 1 of %s is %v, not its name", md.FullName(), f)
			}
			if Lookup(typ.URL) != typ {
				t.Errorf("Lookup(%q) = %v", typ.URL, Lookup(typ.URL))
			}
			if typ.Short == "" || typ.Service == nil || typ.ApplyOrder == 0 {
				t.Errorf("Short %q, Service %v, ApplyOrder %d: every type has them", typ.Short, typ.Service, typ.ApplyOrder)
			}
			if (typ.Child == nil) != (typ.Children == nil) {
				t.Errorf("Child %v with Children %v: both or neither", typ.Child, typ.Children != nil)
			}
			if typ.Child != nil && Lookup(typ.Child.URL) != typ.Child {
				t.Errorf("Child %s is not registered", typ.Child.URL)
			}
			for kind, v := range map[string]string{"URL": typ.URL, "label": typ.Label, "short name": typ.Short, "REST path": typ.RESTPath, "service": typ.Service.ServiceName} {
				unique(kind, v, typ.Label)
			}

			sd, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(typ.Service.ServiceName))
			if err != nil {
				t.Fatalf("service %s: %v", typ.Service.ServiceName, err)
			}
			svc := sd.(protoreflect.ServiceDescriptor)
			if got := proto.GetExtension(svc.Options(), annotations.E_Resource).(*annotations.ResourceAnnotation).GetType(); got != string(md.FullName()) {
				t.Errorf("service %s serves %q, not %s", svc.FullName(), got, md.FullName())
			}
			var fetch string // the POST path of the service's Fetch method
			for i := range svc.Methods().Len() {
				m := svc.Methods().Get(i)
				if strings.HasPrefix(string(m.Name()), "Fetch") {
					fetch = httpPost(t, m)
				}
			}
			if fetch != typ.RESTPath {
				t.Errorf("RESTPath %q, the service's Fetch method posts to %q", typ.RESTPath, fetch)
			}
		})
	}
}

// httpPost is the google.api.http post path a method is annotated with.
func httpPost(t *testing.T, m protoreflect.MethodDescriptor) string {
	t.Helper()
	xt, err := protoregistry.GlobalTypes.FindExtensionByName("google.api.http")
	if err != nil {
		t.Fatal(err)
	}
	rule := proto.GetExtension(m.Options(), xt).(proto.Message).ProtoReflect()
	return rule.Get(rule.Descriptor().Fields().ByName("post")).String()
}

// The spec's full-state types are Listener and Cluster; their children are
// RDS and EDS.
func TestFullStateAndChildren(t *testing.T) {
	var full []string
	for _, typ := range All() {
		if typ.FullState {
			full = append(full, typ.Short)
		}
		if FullState(typ.URL) != typ.FullState || ChildType(typ.URL) != childURL(typ) {
			t.Errorf("%s: FullState %v, ChildType %q disagree with the descriptor", typ.Short, FullState(typ.URL), ChildType(typ.URL))
		}
	}
	if want := []string{"LDS", "CDS"}; !slices.Equal(full, want) {
		t.Errorf("full-state types %v, want %v", full, want)
	}
	if Listener.Child != Route || Cluster.Child != Endpoint {
		t.Errorf("children: Listener → %v, Cluster → %v", Listener.Child, Cluster.Child)
	}
	unknown := resource.ExtensionConfigType
	if Lookup(unknown) != nil || FullState(unknown) || ChildType(unknown) != "" || IsSecret(unknown) {
		t.Errorf("an unregistered type (%s) is known", unknown)
	}
}

func childURL(typ *Type) string {
	if typ.Child == nil {
		return ""
	}
	return typ.Child.URL
}

// The file source pushes secrets, clusters, endpoints, listeners and routes
// in this order, then the rest (unregistered types with them).
func TestApplyOrder(t *testing.T) {
	order := []*Type{Secret, Cluster, Endpoint, Listener, Route}
	for i := 1; i < len(order); i++ {
		if order[i-1].ApplyOrder >= order[i].ApplyOrder {
			t.Errorf("%s (%d) is not pushed before %s (%d)", order[i-1].Short, order[i-1].ApplyOrder, order[i].Short, order[i].ApplyOrder)
		}
	}
	for _, typ := range All() {
		if !slices.Contains(order, typ) && typ.ApplyOrder <= Route.ApplyOrder {
			t.Errorf("%s (%d) is pushed before the ordered types", typ.Short, typ.ApplyOrder)
		}
	}
	if got := ApplyOrder(resource.ExtensionConfigType); got != Runtime.ApplyOrder {
		t.Errorf("an unregistered type ranks %d, want the rest's %d", got, Runtime.ApplyOrder)
	}
}

func TestIsSecret(t *testing.T) {
	for url, want := range map[string]bool{
		resource.SecretType: true,
		"example.com/envoy.extensions.transport_sockets.tls.v3.Secret": true, // any prefix
		"envoy.extensions.transport_sockets.tls.v3.Secret":             true, // none
		"type.googleapis.com/envoy.api.v2.auth.Secret":                 true, // v2
		resource.ClusterType:         false,
		resource.ExtensionConfigType: false,
		"":                           false,
	} {
		if got := IsSecret(url); got != want {
			t.Errorf("IsSecret(%q) = %v, want %v", url, got, want)
		}
	}
	for _, typ := range All() {
		if IsSecret(typ.URL) != typ.Secret {
			t.Errorf("%s: IsSecret %v, Secret %v", typ.Short, IsSecret(typ.URL), typ.Secret)
		}
	}
}

func TestChildren(t *testing.T) {
	hcm := func(rds string) *anypb.Any {
		m := &hcmv3.HttpConnectionManager{}
		if rds != "" {
			m.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rds}}
		}
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	chain := func(names ...string) *listenerv3.FilterChain {
		fc := &listenerv3.FilterChain{}
		for _, n := range names {
			fc.Filters = append(fc.Filters, &listenerv3.Filter{Name: "hcm", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm(n)}})
		}
		return fc
	}
	eds := func(name, service string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: service}}
	}
	cases := []struct {
		name string
		typ  *Type
		msg  proto.Message
		want []string
	}{
		{"EDS cluster with a service name", Cluster, eds("c", "svc"), []string{"svc"}},
		{"EDS cluster without", Cluster, eds("c", ""), []string{"c"}},
		{"static cluster", Cluster, &clusterv3.Cluster{Name: "c"}, nil},
		{"not a cluster", Cluster, &listenerv3.Listener{}, nil},
		{"api listener", Listener, &listenerv3.Listener{ApiListener: &listenerv3.ApiListener{ApiListener: hcm("r")}}, []string{"r"}},
		{"filter chains, sorted and unique", Listener, &listenerv3.Listener{
			FilterChains:       []*listenerv3.FilterChain{chain("b", "a"), chain("", "b")},
			DefaultFilterChain: chain("c"),
		}, []string{"a", "b", "c"}},
		{"no RDS", Listener, &listenerv3.Listener{FilterChains: []*listenerv3.FilterChain{chain("")}}, nil},
		{"not a listener", Listener, &corev3.TypedExtensionConfig{}, nil},
	}
	for _, tc := range cases {
		if got := tc.typ.Children(tc.msg); !slices.Equal(got, tc.want) {
			t.Errorf("%s: children %q, want %q", tc.name, got, tc.want)
		}
	}
}
