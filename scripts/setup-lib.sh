# Helpers shared by scripts/setup and scripts/setup-tests (sourced, not run).

# A plain progress line on stderr (a log or a terminal: no escape codes).
say() { echo "setup: $*" >&2; }

# Run "$@" and, while it runs, say every 20 s that it still does, with the time so far:
# a long pip install prints nothing for minutes otherwise. The ticker stops with the
# command, or with this script if it is killed.
alive() {
  local what="$1"
  shift
  local start
  start="$(date +%s)"
  (
    while sleep 20 && kill -0 "$$" 2>/dev/null; do
      say "$what: still running ($(($(date +%s) - start)) s)"
    done
  ) &
  local ticker=$! rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  say "$what: $(($(date +%s) - start)) s"
  return "$rc"
}

# venv_install NAME SPEC MODULE...: `pip install -e SPEC` into .venv, skipped while the
# stamp (pyproject.toml and SPEC) matches and every MODULE imports: a set-up that is done
# costs no resolver run (seconds) and no index query.
venv_install() {
  local name="$1" spec="$2"
  shift 2
  local stamp=".venv/.setup-$name" key
  key="$(cat pyproject.toml - <<<"$spec" | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" ]] &&
    .venv/bin/python - "$@" <<'PY'
import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))
PY
  then
    return 0
  fi
  rm -f "$stamp"
  alive "installing Sakur4 ($spec) into .venv" \
    .venv/bin/python -m pip install --quiet --progress-bar off -e "$spec"
  echo "$key" >"$stamp"
}
