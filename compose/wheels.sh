#!/bin/sh
# The image's build stage, and CI's replay of it (tests/broker/test_install.py): every wheel the
# image installs, into $1. Each runtime dependency is the version and file requirements.lock
# pins, checked against its hashes; the build backend comes from requirements-build.lock the
# same way; Kairos's own wheel is built from this tree. `python` is whichever is first on PATH.
#   sh compose/wheels.sh /wheels          (from the repository root)
set -eu
out="$1"
python -m pip install --no-cache-dir --require-hashes -r requirements-build.lock
# Wheels only: a source distribution would be built here, and the hashes pin the files pip
# downloaded, not what a build makes of them.
python -m pip download --no-cache-dir --require-hashes --only-binary :all: --no-deps \
    -r requirements.lock -d "$out"
python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir "$out" .
