#!/usr/bin/env bash
# One-command setup: a virtual environment in .venv with headscope and its test tools.
# torch is pinned first so that pip takes the 2.13.0 build (CPU where one is available)
# instead of resolving a newer, multi-GB CUDA build through another package.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
echo "headscope installed in .venv — try: .venv/bin/headscope --help"
