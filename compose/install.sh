#!/bin/sh
# The image's install step, and CI's replay of it (tests/broker/test_install.py): Kairos and
# its locked dependencies from the wheels compose/wheels.sh made in $1, with nothing resolved
# again and no index reached; the hashes are checked a second time. $2 is the version the image
# is labelled with: a label that is not the installed version fails the build.
#   sh compose/install.sh /wheels 0.1.0   (requirements.lock in the working directory)
set -eu
wheels="$1"
labelled="$2"
python -m pip install --no-cache-dir --no-index --find-links "$wheels" --require-hashes \
    -r requirements.lock
python -m pip install --no-cache-dir --no-index --no-deps "$wheels"/kairos_scheduler-*.whl
python -m pip check
installed="$(kairos --version)"
if [ "$installed" != "kairos $labelled" ]; then
    echo "error: the image is labelled $labelled but the wheel installs '$installed':" \
         "build with --build-arg KAIROS_VERSION=<pyproject.toml's version>" >&2
    exit 1
fi
