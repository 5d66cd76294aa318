package deploytest

import (
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomizeBuild builds deploy/kubernetes in-process, as `kubectl apply -k`
// does, and checks the result as one installation.
func TestKustomizeBuild(t *testing.T) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), manifestsDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", manifestsDir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict("kustomize build", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := checkInstallation(t, objs, installWant{hpa: true, pdb: true, namespace: "xds-relay"})
	if s.container.Image != "xds-relay:dev" {
		t.Errorf("image %q after the images transformer, want xds-relay:dev", s.container.Image)
	}
	if len(objs) != 6 {
		t.Errorf("kustomize build: %d objects, want 6", len(objs))
	}
}
