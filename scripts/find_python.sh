# Sourced (not run) by scripts/setup.sh and tests/capture_probe/run_all.sh.
#
# find_python X.Y  prints the path of a CPython X.Y interpreter, or nothing (status 1) when
# there is none. Looks, in order, at $PYXY (e.g. PY312=/path/to/python3.12), at pyenv's
# installs (`pyenv root`/versions/X.Y.*, newest patch first, also ~/.pyenv when pyenv is not
# on the PATH), then at pythonX.Y on the PATH. A candidate counts only if it runs, reports
# version X.Y and has the venv module.
find_python() {
  local want=$1 override_var candidates=() root c
  override_var="PY${want//./}"
  if [ -n "${!override_var:-}" ]; then
    candidates+=("${!override_var}")
  fi
  for root in "$(pyenv root 2>/dev/null || true)" "${PYENV_ROOT:-}" "$HOME/.pyenv"; do
    [ -n "$root" ] && [ -d "$root/versions" ] || continue
    while IFS= read -r c; do
      candidates+=("$c/bin/python3")
    done < <(ls -d "$root/versions/$want".* 2>/dev/null | grep -E "/$want\.[0-9]+$" | sort -rV)
  done
  c=$(command -v "python$want" 2>/dev/null || true)
  [ -n "$c" ] && candidates+=("$c")
  for c in "${candidates[@]}"; do
    [ -x "$c" ] || continue
    if [ "$("$c" -c 'import sys, venv; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
