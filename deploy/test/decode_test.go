package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Paths, relative to this directory (go test runs in the package directory).
const (
	deployDir    = ".."
	manifestsDir = "../kubernetes"
	chartDir     = "../helm/xds-relay"
	examplesDir  = "../examples"
	dockerfile   = "../Dockerfile"
	repoRoot     = "../.."

	// containerName is the relay's container in the Deployment.
	containerName = "xds-relay"
	// configKey is the ConfigMap key holding the relay's configuration file.
	configKey = "relay.yaml"
)

// object is one decoded manifest document.
type object struct {
	source string // file (and document index) it came from
	kind   string
	obj    any // *appsv1.Deployment, *corev1.Service, ...
}

func (o object) String() string { return o.source + " (" + o.kind + ")" }

// splitDocuments splits a multi-document YAML stream, dropping documents that
// are empty or only comments.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var probe any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, err
		}
		if probe != nil {
			docs = append(docs, doc)
		}
	}
}

// decodeStrict decodes every document of data into its typed object: YAML is
// converted to JSON and decoded with unknown fields and duplicate keys
// disallowed.
func decodeStrict(source string, data []byte) ([]object, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var out []object
	for i, doc := range docs {
		src := source
		if len(docs) > 1 {
			src = fmt.Sprintf("%s[%d]", source, i)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		obj, err := newTyped(tm.APIVersion, tm.Kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: strict decode as %s: %w", src, tm.Kind, err)
		}
		out = append(out, object{source: src, kind: tm.Kind, obj: obj})
	}
	return out, nil
}

// TestStrictDecodingRejects proves that the decoder used below is strict: an
// unknown field, a duplicate key, a wrongly typed value and an unknown kind
// all fail.
func TestStrictDecodingRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":     "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selctor: {a: b}}\n",
		"unknown nested":    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        readinessProbe: {httpGet: {path: /readyz, port: 1, hots: x}}\n",
		"duplicate key":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"wrong type":        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {maxUnavailable: [1]}\n",
		"unknown kind":      "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n",
		"wrong api version": "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n",
	} {
		if _, err := decodeStrict(name, []byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
