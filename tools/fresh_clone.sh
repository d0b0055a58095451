#!/usr/bin/env bash
# What a new user meets, measured from a fresh clone of REF (default HEAD) of this repository:
# the wall time of `make install`, the size of the virtualenv it makes, and the wall time of
# `make quickstart` (which trains; skip it with --size-only). Fresh pip, uv and corpus caches, so
# nothing is reused from earlier runs; the clone is deleted afterwards (--keep keeps it).
#
#   tools/fresh_clone.sh 48ec656 --size-only    # before the lighter install
#   tools/fresh_clone.sh HEAD                   # after, with the quickstart's wall time
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
ref=HEAD size_only=0 keep=0
for arg in "$@"; do
  case $arg in
    --size-only) size_only=1 ;;
    --keep) keep=1 ;;
    *) ref=$arg ;;
  esac
done
work=$(mktemp -d)
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
git clone -q --no-hardlinks "$repo" "$work/clone"
git -C "$work/clone" checkout -q "$(git -C "$repo" rev-parse "$ref")"
cd "$work/clone"
export PIP_CACHE_DIR="$work/pip-cache" UV_CACHE_DIR="$work/uv-cache" ALIGNMT_CACHE="$work/alignmt-cache"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# seconds LOG COMMAND...: run COMMAND with its output in LOG, print how long it took
seconds() {
  local log=$1 start=$SECONDS
  shift
  "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; return 1; }
  echo $((SECONDS - start))
}

echo "ref: $ref ($(git rev-parse --short HEAD))"
install_s=$(seconds "$work/install.log" make install)
echo "make install: ${install_s} s"
echo "virtualenv: $(du -sm .venv | cut -f1) MiB ($(.venv/bin/python -m pip list 2>/dev/null | tail -n +3 | wc -l) packages)"
echo "largest: $(du -sm .venv/lib/python3*/site-packages/* | sort -rn | head -8 | awk '{printf "%s %s MiB, ", $2, $1}' | sed 's|[^ ]*site-packages/||g')"
if [ "$size_only" = 0 ]; then
  quickstart_s=$(seconds "$work/quickstart.log" make quickstart)
  echo "make quickstart after the install: ${quickstart_s} s"
  echo "make quickstart from a fresh clone: $((install_s + quickstart_s)) s"
  echo "quickstart's $(grep -o 'test BLEU [0-9][0-9.]*' "$work/quickstart.log" | tail -n 1)"
fi
[ "$keep" = 0 ] || echo "kept: $work (install.log, quickstart.log, clone/)"
