#!/usr/bin/env bash
# Set up (see setup.sh), then redraw docs/observing.md's picture of what torch_graphfuse fused in
# the demo's ResNet-50: docs/fusion_resnet50.svg. Graphviz is installed with apt-get where
# `dot` is missing and this runs as root; otherwise the picture falls back to its text form
# (docs/fusion_resnet50.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if ! command -v dot >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "picture: installing Graphviz"
  apt-get update -qq && apt-get install -y -qq graphviz >/dev/null
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python examples/fusion_picture.py "$@"
