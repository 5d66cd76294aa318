#!/usr/bin/env bash
# Tests of the deployment files (deploy/): manifests, Helm chart, bootstraps,
# Dockerfile. A separate Go module; called from .ci/run.
set -euo pipefail
cd "$(dirname "$0")"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
go vet ./...
go test -count=1 ./...
