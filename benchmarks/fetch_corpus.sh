#!/usr/bin/env bash
# Fetch the real-code corpus used by benchmarks/bench_check.py and tests/test_prefilter.py:
# the Python sources of seven AMP-heavy libraries, from their wheels (nothing is installed).
#
#   bash benchmarks/fetch_corpus.sh [DEST]        # default DEST: ./corpus
#   AMPLINT_CORPUS=DEST/src python -m pytest tests/test_prefilter.py
#   python benchmarks/bench_check.py DEST/src
#
# Versions are pinned so that figures in BENCHMARKS.md can be reproduced; pass
# UNPINNED=1 to take the newest releases instead.
set -euo pipefail

DEST="${1:-corpus}"
PINNED="transformers==5.24.0 accelerate==1.15.0 timm==1.0.31 pytorch-lightning==2.6.6 diffusers==0.42.1 peft==0.21.2 trl==1.16.0"
LATEST="transformers accelerate timm pytorch-lightning diffusers peft trl"
if [[ "${UNPINNED:-0}" == "1" ]]; then PACKAGES="$LATEST"; else PACKAGES="$PINNED"; fi

mkdir -p "$DEST/wheels" "$DEST/src"
# --no-deps: only these seven; --only-binary: wheels, never an sdist build.
# shellcheck disable=SC2086
python -m pip download --quiet --no-deps --only-binary=:all: --dest "$DEST/wheels" $PACKAGES
for wheel in "$DEST"/wheels/*.whl; do
    name="$(basename "$wheel" .whl)"
    rm -rf "${DEST:?}/src/$name"
    python -m zipfile -e "$wheel" "$DEST/src/$name"
done
echo "corpus: $(find "$DEST/src" -name '*.py' | wc -l) Python files under $DEST/src"
