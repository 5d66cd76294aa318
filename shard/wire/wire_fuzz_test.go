package wire

import (
	"bytes"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzParse feeds arbitrary bytes to every parser of the package and
// checks them against the standard protobuf decoder, then round-trips the
// fuzzed strings through the builders:
//
//   - no parser panics; ResourceName never returns an empty name;
//   - whenever the standard decoder accepts the bytes as the message, the
//     parser accepts them too (upstream responses are standard protobuf),
//     and both agree on every field the parser reads (version, type URL,
//     nonce, resource count, removed names, names, aliases, presence of the
//     body and TTL);
//   - BodyBuilder + NonceSuffix, DeltaBodyBuilder (DeltaEntry, AddRemoved),
//     and BodyChecker accepting what they built
//   - NonceSuffix and WrappedAny decode, with the standard decoder and
//     with the package's parsers, as exactly what was put in.
func FuzzParse(f *testing.F) {
	cl := func(name string) []byte {
		a, _ := anypb.New(&clusterv3.Cluster{Name: name, AltStatName: "x"})
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
		return b
	}
	sotw, _ := proto.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: "7", TypeUrl: clusterType, Nonce: "n1", Canary: true,
		Resources: []*anypb.Any{{TypeUrl: clusterType, Value: []byte{10, 1, 'a'}}}})
	delta, _ := proto.Marshal(&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "s", TypeUrl: clusterType, Nonce: "n2",
		RemovedResources: []string{"gone"}, Resources: []*discoveryv3.Resource{{Name: "a", Version: "1", Aliases: []string{"x"},
			Resource: &anypb.Any{TypeUrl: clusterType, Value: []byte{10, 1, 'a'}}, Ttl: durationpb.New(5 * time.Second)}}})
	res, _ := proto.Marshal(&discoveryv3.Resource{Name: "a", Version: "1", Aliases: []string{"x", "y"}})
	group := protowire.AppendTag(nil, 9, protowire.StartGroupType)
	group = protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(group, 1, protowire.VarintType), 1), 9, protowire.EndGroupType)
	for _, b := range [][]byte{nil, sotw, delta, res, cl("a"), sotw[:len(sotw)-1], delta[:len(delta)/2], group,
		append(protowire.AppendTag(nil, 1, protowire.VarintType), 7), {0}, {0x0a, 0xff}, {0x0a, 0x80, 0x80, 0x80, 0x80, 0x10}} {
		f.Add(b, "v1", clusterType, "nonce", []byte("value"))
	}
	f.Add(cl("b"), "", "", "", []byte(nil))
	f.Add(sotw, "\xff", "t", "n", []byte{0})

	f.Fuzz(func(t *testing.T, data []byte, version, typeURL, nonce string, value []byte) {
		if len(data) > 1024 || len(version)+len(typeURL)+len(nonce)+len(value) > 512 {
			// Long inputs find nothing short ones do not (lengths of 128 and
			// more already take 2-byte varints), and make the fuzzer's
			// quadratic minimization of new inputs crawl.
			return
		}
		checkParseResponse(t, data)
		checkParseAny(t, data)
		checkResourceName(t, data)
		checkParseDeltaResponse(t, data)
		checkParseDeltaResource(t, data)
		roundTrip(t, version, typeURL, nonce, value)
	})
}

// validAs decodes data into want with proto. It reports false when proto
// rejects data too, and fails the test when proto accepts what parser
// rejected with err.
func validAs(t *testing.T, data []byte, want proto.Message, parser string, err error) bool {
	t.Helper()
	if proto.Unmarshal(data, want) != nil {
		return false
	}
	if err != nil {
		t.Fatalf("%s rejects a valid %s %v: %v", parser, want.ProtoReflect().Descriptor().Name(), want, err)
	}
	return true
}

func checkParseResponse(t *testing.T, data []byte) {
	got, err := ParseResponse(data)
	var want discoveryv3.DiscoveryResponse
	if !validAs(t, data, &want, "ParseResponse", err) {
		return
	}
	if got.VersionInfo != want.VersionInfo || got.TypeURL != want.TypeUrl || got.Nonce != want.Nonce || len(got.Resources) != len(want.Resources) {
		t.Fatalf("ParseResponse = %q %q %q %d resources, proto = %q %q %q %d", got.VersionInfo, got.TypeURL, got.Nonce, len(got.Resources),
			want.VersionInfo, want.TypeUrl, want.Nonce, len(want.Resources))
	}
	for i, raw := range got.Resources {
		var a anypb.Any
		if err := proto.Unmarshal(raw, &a); err != nil || !proto.Equal(&a, want.Resources[i]) {
			t.Fatalf("resource %d: raw %x decodes as %v (%v), proto has %v", i, raw, &a, err, want.Resources[i])
		}
	}
}

func checkParseAny(t *testing.T, data []byte) {
	typeURL, value, err := ParseAny(data)
	var want anypb.Any
	if !validAs(t, data, &want, "ParseAny", err) {
		return
	}
	if typeURL != want.TypeUrl || !bytes.Equal(value, want.Value) {
		t.Fatalf("ParseAny = %q %x, proto = %q %x", typeURL, value, want.TypeUrl, want.Value)
	}
}

func checkResourceName(t *testing.T, data []byte) {
	name, err := ResourceName(data)
	if err == nil && name == "" {
		t.Fatal("ResourceName returned an empty name without error")
	}
	// Field 1 is Cluster.name; the other fields of Cluster do not matter:
	// those of another wire type are kept as unknown fields.
	var want clusterv3.Cluster
	if proto.Unmarshal(data, &want) != nil {
		return
	}
	switch {
	case want.Name == "" && err != ErrNoName:
		t.Fatalf("ResourceName = %q, %v; want ErrNoName for a resource without name", name, err)
	case want.Name != "" && (err != nil || name != want.Name):
		t.Fatalf("ResourceName = %q, %v; want %q", name, err, want.Name)
	}
}

func checkParseDeltaResponse(t *testing.T, data []byte) {
	got, err := ParseDeltaResponse(data)
	var want discoveryv3.DeltaDiscoveryResponse
	if !validAs(t, data, &want, "ParseDeltaResponse", err) {
		return
	}
	if got.SystemVersionInfo != want.SystemVersionInfo || got.TypeURL != want.TypeUrl || got.Nonce != want.Nonce ||
		len(got.Resources) != len(want.Resources) || !slices.Equal(got.Removed, want.RemovedResources) {
		t.Fatalf("ParseDeltaResponse = %+v, proto = %v", got, &want)
	}
	for i, raw := range got.Resources {
		r, err := ParseDeltaResource(raw)
		if err != nil {
			t.Fatalf("resource %d of a valid response: %v", i, err)
		}
		if w := want.Resources[i]; r.Name != w.Name || r.Version != w.Version || !slices.Equal(r.Aliases, w.Aliases) ||
			(r.Any != nil) != (w.Resource != nil) || (r.TTL != nil) != (w.Ttl != nil) {
			t.Fatalf("resource %d = %+v, proto = %v", i, r, w)
		}
	}
}

func checkParseDeltaResource(t *testing.T, data []byte) {
	got, err := ParseDeltaResource(data)
	var want discoveryv3.Resource
	if !validAs(t, data, &want, "ParseDeltaResource", err) {
		return
	}
	if got.Name != want.Name || got.Version != want.Version || !slices.Equal(got.Aliases, want.Aliases) ||
		(got.Any != nil) != (want.Resource != nil) || (got.TTL != nil) != (want.Ttl != nil) {
		t.Fatalf("ParseDeltaResource = %+v, proto = %v", got, &want)
	}
}

// roundTrip builds responses from the fuzzed strings and decodes them.
func roundTrip(t *testing.T, version, typeURL, nonce string, value []byte) {
	if !utf8.ValidString(version) || !utf8.ValidString(typeURL) || !utf8.ValidString(nonce) {
		return // proto3 strings are UTF-8: the standard decoder would refuse them
	}
	anys := [][]byte{AppendAny(nil, typeURL, value), AppendAny(nil, nonce, nil), AppendAny(nil, "", value)}

	// SotW: a shared body and a per-stream suffix.
	bb := NewBodyBuilder(version, len(value))
	for _, a := range anys {
		bb.AddResource(a)
	}
	body := bb.Finish(typeURL)
	c := CheckBody(NewBody(body), version)
	for _, a := range anys {
		c.AddResource(a)
	}
	if !c.Finish(typeURL) {
		t.Fatal("a body does not check against the calls that built it")
	}
	msg := append(slices.Clip(body), NonceSuffix(nonce)...)
	var resp discoveryv3.DiscoveryResponse
	if err := proto.Unmarshal(msg, &resp); err != nil {
		t.Fatalf("built response does not decode: %v", err)
	}
	if resp.VersionInfo != version || resp.TypeUrl != typeURL || resp.Nonce != nonce || len(resp.Resources) != len(anys) {
		t.Fatalf("built response decodes as %v", &resp)
	}
	for i, a := range anys {
		tu, v, err := ParseAny(a)
		if err != nil || resp.Resources[i].TypeUrl != tu || !bytes.Equal(resp.Resources[i].Value, v) {
			t.Fatalf("resource %d decodes as %v, built from %q %x (%v)", i, resp.Resources[i], tu, v, err)
		}
	}
	if raw, err := ParseResponse(msg); err != nil || raw.VersionInfo != version || raw.TypeURL != typeURL || raw.Nonce != nonce ||
		len(raw.Resources) != len(anys) || !bytes.Equal(raw.Resources[0], anys[0]) {
		t.Fatalf("ParseResponse of a built response = %+v, %v", raw, err)
	}

	// Delta: shared entries, removed names, a suffix.
	ttl, err := proto.Marshal(durationpb.New(time.Duration(len(value)+1) * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	aliases := []string{nonce, version}
	db := NewDeltaBodyBuilder(version, 0)
	db.AddEntry(DeltaEntry(typeURL, version, aliases, anys[0], ttl))
	db.AddEntry(DeltaEntry(nonce, "", nil, nil, nil))
	db.AddRemoved(version)
	db.AddRemoved(typeURL)
	dbody := db.Finish(typeURL)
	c = CheckBody(NewBody(dbody), version)
	c.AddDeltaResource(typeURL, version, aliases, anys[0], ttl)
	c.AddDeltaResource(nonce, "", nil, nil, nil)
	c.AddRemoved(version)
	c.AddRemoved(typeURL)
	if !c.Finish(typeURL) {
		t.Fatal("a delta body does not check against the calls that built it")
	}
	msg = append(slices.Clip(dbody), NonceSuffix(nonce)...)
	var dresp discoveryv3.DeltaDiscoveryResponse
	if err := proto.Unmarshal(msg, &dresp); err != nil {
		t.Fatalf("built delta response does not decode: %v", err)
	}
	r0, r1 := dresp.GetResources()[0], dresp.GetResources()[1]
	if dresp.SystemVersionInfo != version || dresp.TypeUrl != typeURL || dresp.Nonce != nonce || len(dresp.Resources) != 2 ||
		!slices.Equal(dresp.RemovedResources, []string{version, typeURL}) ||
		r0.Name != typeURL || r0.Version != version || !slices.Equal(r0.Aliases, aliases) ||
		r0.Resource.GetTypeUrl() != typeURL || !bytes.Equal(r0.Resource.GetValue(), value) || r0.Ttl.AsDuration() != time.Duration(len(value)+1)*time.Millisecond ||
		r1.Name != nonce || r1.Version != "" || r1.Resource != nil || r1.Ttl != nil {
		t.Fatalf("built delta response decodes as %v", &dresp)
	}
	raw, err := ParseDeltaResponse(msg)
	if err != nil || raw.SystemVersionInfo != version || raw.TypeURL != typeURL || raw.Nonce != nonce || len(raw.Resources) != 2 ||
		!slices.Equal(raw.Removed, []string{version, typeURL}) {
		t.Fatalf("ParseDeltaResponse of a built response = %+v, %v", raw, err)
	}
	if e, err := ParseDeltaResource(raw.Resources[0]); err != nil || e.Name != typeURL || e.Version != version ||
		!slices.Equal(e.Aliases, aliases) || !bytes.Equal(e.Any, anys[0]) || !bytes.Equal(e.TTL, ttl) {
		t.Fatalf("ParseDeltaResource of a built entry = %+v, %v", e, err)
	}

	// A SotW resource wrapped for its TTL.
	var a anypb.Any
	if err := proto.Unmarshal(WrappedAny(typeURL, anys[0], ttl), &a); err != nil || a.TypeUrl != ResourceTypeURL {
		t.Fatalf("wrapped resource decodes as %v, %v", &a, err)
	}
	var w discoveryv3.Resource
	if err := a.UnmarshalTo(&w); err != nil || w.Name != typeURL || w.Resource.GetTypeUrl() != typeURL ||
		!bytes.Equal(w.Resource.GetValue(), value) || w.Ttl == nil {
		t.Fatalf("wrapped resource holds %v, %v", &w, err)
	}
}
