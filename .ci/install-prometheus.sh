#!/usr/bin/env bash
# Installs Debian's prometheus package (promtool and the server) for the
# tests of the alert rules and the dashboard (deploy/test/monitoring_test.go
# and monitoring_e2e_test.go), unless both are already on PATH. Needs root
# (CI containers run as root). The tests run a server of their own; in a
# container, which has no init system, the package's service stays stopped.
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  install() {
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  }
  echo "installing prometheus (apt-get)"
  # The package lists are refreshed only when they lack the package (a
  # fresh container) or are stale (the install fails).
  if ! apt-cache show prometheus >/dev/null 2>&1 || ! install; then
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    install
  fi
fi
promtool --version | head -1
prometheus --version 2>&1 | head -1
