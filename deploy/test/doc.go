// Package deploytest checks the deployment files under deploy/: the Kubernetes
// manifests, the Helm chart (rendered in-process), the client bootstrap examples
// and the Dockerfile. It is its own module so that the relay's go.mod does not
// carry the Kubernetes and Helm dependencies; run it with deploy/test/run.sh.
package deploytest
