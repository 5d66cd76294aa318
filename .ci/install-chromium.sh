#!/usr/bin/env bash
# Installs Debian's chromium package for the headless browser test of the
# admin status page (cmd/xds-relay/app/e2e_status_test.go), unless a
# chromium is already on PATH. Needs root (CI containers run as root).
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  bin=chromium
elif command -v chromium-browser >/dev/null 2>&1; then
  bin=chromium-browser
else
  export DEBIAN_FRONTEND=noninteractive
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "installing chromium (apt-get)"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  bin=chromium
fi
"$bin" --version
