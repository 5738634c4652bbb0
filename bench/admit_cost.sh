#!/usr/bin/env bash
# Instructions one admission (lua/admit.lua) costs inside redis-server, counted by callgrind:
# within about 1 % from run to run, whatever else the machine is doing (wall-clock figures of
# the ledger bench move by ±10 µs from run to run on a small VM).
#
#   bench/admit_cost.sh                # this tree's scripts
#   bench/admit_cost.sh --rev 8d8d2b1  # a commit's, if it predates the constants written from
#                                      # Rust (its lua/common.lua says "contract v1")
#
# Needs valgrind, redis-server and python3; builds router-core's `lua_script` example for
# this tree's scripts. About a minute per case.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
REV=""
while (($#)); do
    case $1 in
        --rev) REV=${2:?--rev needs a commit}; shift 2 ;;
        -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "admit_cost.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for tool in valgrind redis-server python3; do
    command -v "$tool" >/dev/null || { echo "admit_cost.sh: $tool is not installed" >&2; exit 1; }
done

DIR=$(mktemp -d "${TMPDIR:-/tmp}/admit-cost.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
if [[ -z $REV ]]; then
    for name in admit settle; do
        (cd "$REPO" && cargo run -q -p router-core --example lua_script -- "$name") >"$DIR/$name.lua"
    done
    echo v3 >"$DIR/contract"
else
    common=$(git -C "$REPO" show "$REV:lua/common.lua") || {
        echo "admit_cost.sh: no lua/common.lua at '$REV'" >&2
        exit 1
    }
    if ! grep -q 'contract v1' <<<"$common"; then
        echo "admit_cost.sh: '$REV' writes its constants from Rust: check it out and run this script there" >&2
        exit 1
    fi
    for name in admit settle; do
        { printf '%s\n' "$common"; git -C "$REPO" show "$REV:lua/$name.lua"; } >"$DIR/$name.lua"
    done
    echo v1 >"$DIR/contract"
fi
python3 "$REPO/bench/admit_cost.py" "$DIR"
