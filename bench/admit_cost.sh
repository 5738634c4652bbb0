#!/usr/bin/env bash
# Instructions one admission (lua/admit.lua) costs inside redis-server, counted by callgrind:
# within about 1 % from run to run, whatever else the machine is doing (wall-clock figures of
# the ledger bench move by ±10 µs from run to run on a small VM).
#
#   bench/admit_cost.sh                        # this tree's scripts
#   bench/admit_cost.sh --rev 8d8d2b1          # a commit's, if it predates the constants written
#                                              # from Rust (its lua/common.lua says "contract v1")
#   bench/admit_cost.sh --wall 12 --against 8d8d2b1
#                                              # time inside a plain redis-server instead, this
#                                              # tree's and the commit's scripts in turn, 12 rounds
#
# Needs valgrind (not for --wall), redis-server and python3; builds router-core's `lua_script`
# example for this tree's scripts. About 20 s per run, 2 minutes for --wall 12.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
REV="" AGAINST="" WALL=""
while (($#)); do
    case $1 in
        --rev) REV=${2:?--rev needs a commit}; shift 2 ;;
        --against) AGAINST=${2:?--against needs a commit}; shift 2 ;;
        --wall) WALL=${2:?--wall needs a number of rounds}; shift 2 ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "admit_cost.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ -n $AGAINST && -z $WALL ]] && { echo "admit_cost.sh: --against goes with --wall" >&2; exit 2; }
tools=(redis-server python3)
[[ -z $WALL ]] && tools+=(valgrind)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || { echo "admit_cost.sh: $tool is not installed" >&2; exit 1; }
done

DIR=$(mktemp -d "${TMPDIR:-/tmp}/admit-cost.XXXXXX")
trap 'rm -rf "$DIR"' EXIT

scripts() { # scripts OUT_DIR [REV]: admit.lua, settle.lua, contract and name into OUT_DIR
    local out=$1 rev=${2:-} common name
    mkdir -p "$out"
    if [[ -z $rev ]]; then
        for name in admit settle; do
            (cd "$REPO" && cargo run -q -p router-core --example lua_script -- "$name") >"$out/$name.lua"
        done
        echo v3 >"$out/contract"
        echo "this tree" >"$out/name"
        return
    fi
    common=$(git -C "$REPO" show "$rev:lua/common.lua") || {
        echo "admit_cost.sh: no lua/common.lua at '$rev'" >&2
        exit 1
    }
    if ! grep -q 'contract v1' <<<"$common"; then
        echo "admit_cost.sh: '$rev' writes its constants from Rust: check it out and run this script there" >&2
        exit 1
    fi
    for name in admit settle; do
        { printf '%s\n' "$common"; git -C "$REPO" show "$rev:lua/$name.lua"; } >"$out/$name.lua"
    done
    echo v1 >"$out/contract"
    echo "$rev" >"$out/name"
}

scripts "$DIR/a" "$REV"
if [[ -n $WALL ]]; then
    args=(--wall "$WALL")
    if [[ -n $AGAINST ]]; then
        scripts "$DIR/b" "$AGAINST"
        args+=(--against "$DIR/b")
    fi
    python3 "$REPO/bench/admit_cost.py" "$DIR/a" "${args[@]}"
else
    python3 "$REPO/bench/admit_cost.py" "$DIR/a"
fi
