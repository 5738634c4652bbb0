#!/usr/bin/env bash
# The soak test of `llmroute serve` (tests/soak/soak.py) on the `dist` build, for 30 minutes by
# default: steady load on a Redis ledger, runtime keys made and revoked, Redis restarted empty
# half-way; then RSS growth after the warm-up under 5 %, the same open files at the two quiet
# moments, nothing in flight, a usage record for every admitted request, exit 0 on SIGTERM.
# See docs/testing.md ("The soak test").
#
#   bench/soak.sh [--no-build] [--minutes M] [other soak.py options: --rate R, --threads N, --seed S, --keep]
#
# Environment: CARGO_TARGET_DIR (honoured for the build and the binary's path).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=1
MINUTES=30
PASS=()
while (($#)); do
    case "$1" in
        --no-build) BUILD=0 ;;
        --minutes)
            [[ $# -ge 2 ]] || { echo "soak.sh: --minutes needs a number" >&2; exit 2; }
            MINUTES=$2
            shift
            ;;
        --minutes=*) MINUTES=${1#*=} ;;
        -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) PASS+=("$1") ;;
    esac
    shift
done

TARGET=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET == /* ]] || TARGET=$REPO/$TARGET
# The `dist` profile (whole-program LTO): what every measurement is made with.
LLMROUTE=$TARGET/dist/llmroute
if ((BUILD)); then
    (cd "$REPO" && cargo build --profile dist -p router-cli)
fi
[[ -x $LLMROUTE ]] || { echo "soak.sh: no $LLMROUTE (build it, or drop --no-build)" >&2; exit 2; }

exec python3 "$REPO/tests/soak/soak.py" "$LLMROUTE" --minutes "$MINUTES" "${PASS[@]}"
