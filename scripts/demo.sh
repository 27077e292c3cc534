#!/usr/bin/env bash
# Set up (see setup.sh) and run the demo: a ResNet-50 fused by torch_graphfuse.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
python examples/resnet_demo.py "$@"
