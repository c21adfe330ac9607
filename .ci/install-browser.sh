#!/usr/bin/env bash
# Debian's Chromium for the demo's browser test (Playwright drives it through executable_path;
# no browser is downloaded by Playwright). Skipped when it is already there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
