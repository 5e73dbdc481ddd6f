#!/usr/bin/env bash
# Fetch the real-code corpus used by benchmarks/ (bench_check.py, real_code_eval.py) and by the
# opt-in corpus tests (AMPLINT_CORPUS): the Python sources of AMP-heavy libraries and toolkits,
# as a user would get them (`pip download --no-deps`; wheels, or the sdist where a project ships
# none). Nothing is installed or run.
#
#   bash benchmarks/fetch_corpus.sh [DEST]        # default DEST: ./corpus
#   AMPLINT_CORPUS=DEST/src python -m pytest tests/test_prefilter.py
#   python benchmarks/bench_check.py DEST/src
#
# Versions are pinned so that figures in BENCHMARKS.md can be reproduced; pass
# UNPINNED=1 to take the newest releases instead.
set -euo pipefail

DEST="${1:-corpus}"
# The seven libraries of issue 7 (speed) and the deprecation-rule measurements.
LIBRARIES="transformers==5.24.0 accelerate==1.15.0 timm==1.0.31 pytorch-lightning==2.6.6 diffusers==0.42.1 peft==0.21.2 trl==1.16.0"
# Toolkits whose training steps are spread over modules, trainers and wrappers (issue 13).
TOOLKITS="espnet==202511 deepspeed==0.19.8 torchtune==0.6.1 torchtitan==0.3.0 nemo-toolkit==3.0.0 speechbrain==1.1.2 salesforce-lavis==1.0.2 mmdet==3.3.0 sentence-transformers==6.2.0 ultralytics==8.4.190"
PACKAGES="$LIBRARIES $TOOLKITS"
if [[ "${UNPINNED:-0}" == "1" ]]; then PACKAGES="$(echo "$PACKAGES" | sed -E 's/==[^ ]+//g')"; fi

mkdir -p "$DEST/dist" "$DEST/src"
for spec in $PACKAGES; do
    # --no-deps: only the package itself; a wheel where there is one, else the sdist (deepspeed).
    python -m pip download --quiet --no-deps --no-build-isolation --dest "$DEST/dist" "$spec" 2>/dev/null \
        || python -m pip download --quiet --no-deps --no-binary=:all: --no-build-isolation --dest "$DEST/dist" "$spec"
done
for archive in "$DEST"/dist/*; do
    case "$archive" in
        *.whl) name="$(basename "$archive" .whl)"; rm -rf "${DEST:?}/src/$name"
               python -m zipfile -e "$archive" "$DEST/src/$name" ;;
        *.tar.gz) name="$(basename "$archive" .tar.gz)"; rm -rf "${DEST:?}/src/$name"
                  mkdir -p "$DEST/src/$name" && tar -xzf "$archive" -C "$DEST/src/$name" --strip-components=1 ;;
    esac
done
echo "corpus: $(find "$DEST/src" -name '*.py' | wc -l) Python files under $DEST/src"
