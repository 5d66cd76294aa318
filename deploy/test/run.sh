#!/usr/bin/env bash
# Tests of the deployment files (deploy/): manifests, Helm chart, bootstraps,
# Dockerfile, and the monitoring objects (with promtool and a Prometheus
# server when Debian's prometheus package is installed: .ci/install-prometheus.sh;
# under CI=true they must be). A separate Go module; called from .ci/run.
set -euo pipefail
cd "$(dirname "$0")"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
go vet ./...
go test -count=1 ./...
