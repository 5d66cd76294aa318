#!/usr/bin/env bash
# Runs each go test -fuzz target for a short, bounded time (FUZZTIME: a
# duration, or an execution count like 5000x, which CI uses: a count always
# completes the baseline-coverage pass of a cold cache; 10s by
# default), one after another. Every target runs even if an earlier one
# fails; the script fails if any did. A failing input is written under the
# package's testdata/fuzz/<Target>/: commit it, and plain `go test` replays
# it as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

fuzztime="${FUZZTIME:-10s}"
# The minimization of a new or failing input is bounded too, so one slow
# minimization cannot eat the run.
minimizetime="${FUZZMINIMIZETIME:-5s}"

targets=(
  "FuzzSotWRequests ./relay/"
  "FuzzDeltaRequests ./relay/"
  "FuzzClassifier ./shard/"
  "FuzzParse ./shard/wire/"
  "FuzzParseConfig ./cmd/xds-relay/app/"
)

failed=()
for t in "${targets[@]}"; do
  read -r name pkg <<<"$t"
  echo "--- fuzz $name ($pkg, $fuzztime)"
  if ! go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimizetime" "$pkg"; then
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]}"
  exit 1
fi
