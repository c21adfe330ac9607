#!/usr/bin/env bash
# Installs arjet with everything its test suite, evaluation, demo, training and quantized weights need:
# the Python package (editable) with all extras (eval, app, serve, ray, train, quant, test, docs), and Debian's Chromium for the demo's browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --upgrade pip >/dev/null
python3 -m pip install -e ".[all]"
if [ -f .ci/install-browser.sh ]; then
    bash .ci/install-browser.sh
fi
