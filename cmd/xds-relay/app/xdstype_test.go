package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Every registered type is served, labelled, named and gated as its
// descriptor says, and an unregistered one (ECDS, TypedExtensionConfig) is
// neither served per type nor given a label or a short name of its own.
func TestConsumersAgreeWithTheTypeRegistry(t *testing.T) {
	g := grpc.NewServer()
	defer g.Stop()
	srv := &relay.Server{}
	srv.Register(g)
	services := g.GetServiceInfo()
	rest := srv.RESTHandler(0)
	restCode := func(path string) int { // a GET: 405 on an endpoint, 404 elsewhere
		rec := httptest.NewRecorder()
		rest.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	gate := secretsGate(false)
	isGated := func(typeURL string) bool { return gate(context.Background(), typeURL) != nil }

	for _, typ := range xdstype.All() {
		if _, ok := services[typ.Service.ServiceName]; !ok {
			t.Errorf("%s: service %s is not served", typ.Short, typ.Service.ServiceName)
		}
		if typ.RESTPath != "" && restCode(typ.RESTPath) != http.StatusMethodNotAllowed {
			t.Errorf("%s: REST path %s is not served (GET answered %d)", typ.Short, typ.RESTPath, restCode(typ.RESTPath))
		}
		if got := typeLabel(typ.URL); got != typ.Label {
			t.Errorf("%s: metric label %q, want %q", typ.Short, got, typ.Label)
		}
		if got := shortType(typ.URL); got != typ.Short {
			t.Errorf("%s: status page name %q, want %q", typ.Short, got, typ.Short)
		}
		if isGated(typ.URL) != typ.Secret {
			t.Errorf("%s: gated as a secret %v, Secret %v", typ.Short, isGated(typ.URL), typ.Secret)
		}
	}
	// Besides the types' services: ADS, and LoadReportingService (load
	// reports, no resource type).
	for _, name := range []string{"envoy.service.discovery.v3.AggregatedDiscoveryService", "envoy.service.load_stats.v3.LoadReportingService"} {
		if _, ok := services[name]; !ok {
			t.Errorf("%s is not served", name)
		}
	}
	if got, want := len(services), len(xdstype.All())+2; got != want {
		t.Errorf("%d services served, want ADS, LRS and one per registered type (%d)", got, want)
	}

	ecds := resourcev3.ExtensionConfigType
	if _, ok := services["envoy.service.extension.v3.ExtensionConfigDiscoveryService"]; ok {
		t.Error("ECDS is served per type, but not registered")
	}
	if code := restCode(resourcev3.FetchExtensionConfigs); code != http.StatusNotFound {
		t.Errorf("ECDS's REST path answered %d, want 404", code)
	}
	if got := typeLabel(ecds); got != "other" {
		t.Errorf("ECDS's metric label %q, want other", got)
	}
	if got := shortType(ecds); got != "TypedExtensionConfig" {
		t.Errorf("ECDS on the status page %q, want its message name", got)
	}
	if isGated(ecds) {
		t.Error("ECDS is gated as a secret")
	}
}
