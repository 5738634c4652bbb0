#!/usr/bin/env bash
# The gateway board: what `llmroute serve` adds to a request, against the same client straight to
# the same mock upstream (the floor), for each state store. See bench/README.md, "The gateway board".
#
#   bench/board.sh [--quick] [--no-build] [--cases LIST]
#
# Environment: OUT (default a new temporary directory), CARGO_TARGET_DIR, LLMROUTE_USAGE and LLMROUTE_WORKERS (passed to
# the gateways; default: their own default, usage records in SQLite in each case's state directory).
set -euo pipefail

ALL_CASES=proxy,memory,embedded,redis,redis-lease,redis-keyed,redis-keyed-lease,redis-open

usage() {
    cat <<EOF
usage: bench/board.sh [--quick] [--no-build] [--cases LIST]

  --quick        fewer requests and shorter load runs: a smoke test (about 1.5 minutes)
  --no-build     do not run cargo; use target/dist/{llmroute,mock-upstream,loadgen,bare-proxy} as built
  --cases LIST   comma-separated, out of $ALL_CASES (default: all)
  -h, --help     this text

Environment: OUT (results directory, default a new mktemp -d), CARGO_TARGET_DIR,
LLMROUTE_USAGE and LLMROUTE_WORKERS (passed on to the gateways).
EOF
}

QUICK=0
BUILD=1
CASES=$ALL_CASES
while (($#)); do
    case "$1" in
        --quick) QUICK=1 ;;
        --no-build) BUILD=0 ;;
        --cases)
            [[ $# -ge 2 ]] || { echo "board.sh: --cases needs a LIST" >&2; exit 2; }
            CASES=$2
            shift
            ;;
        --cases=*) CASES=${1#*=} ;;
        -h | --help) usage; exit 0 ;;
        *) echo "board.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
IFS=, read -r -a CASE_LIST <<<"$CASES"
for c in "${CASE_LIST[@]}"; do
    [[ ,$ALL_CASES, == *,$c,* ]] || { echo "board.sh: unknown case '$c' (one of $ALL_CASES)" >&2; exit 2; }
done

# Sizes: requests per round at concurrency 1 (whole and streamed), rounds, seconds per load run.
if ((QUICK)); then
    C1_REQUESTS=300 C1_WARMUP=50 ROUNDS=2 LOAD_SECS=2
else
    C1_REQUESTS=1000 C1_WARMUP=100 ROUNDS=5 LOAD_SECS=10
fi
LOAD_WARMUP=5 # per connection
DELAY_MS=20

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET == /* ]] || TARGET=$REPO/$TARGET
LLMROUTE=$TARGET/dist/llmroute
MOCK=$TARGET/dist/mock-upstream
LOADGEN=$TARGET/dist/loadgen
PROXY=$TARGET/dist/bare-proxy
command -v redis-server >/dev/null || { echo "board.sh: redis-server is not installed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "board.sh: python3 is not installed" >&2; exit 1; }
if ((BUILD)); then
    (cd "$REPO" && cargo build --profile dist -p router-cli &&
        cargo build --profile dist -p llmroute-tests --bin mock-upstream --bin loadgen --bin bare-proxy)
fi
for bin in "$LLMROUTE" "$MOCK" "$LOADGEN" "$PROXY"; do
    [[ -x $bin ]] || { echo "board.sh: no $bin (drop --no-build?)" >&2; exit 1; }
done

OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/llmroute-board.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "results: $OUT"

# ---------------------------------------------------------------------------------------------
# What this script starts (Redis, the mocks, one gateway at a time) is stopped on exit, by pid.

PIDS=()
GATEWAY_PID=""

stop_pid() { # stop_pid PID: TERM, up to 5 s, then KILL
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    [[ -n $GATEWAY_PID ]] && stop_pid "$GATEWAY_PID"
    for pid in "${PIDS[@]}"; do
        stop_pid "$pid"
    done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_redis() { # start_redis PORT: an empty redis-server on PORT, no persistence; sets REDIS_PID
    local port=$1
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" \
        --daemonize no --logfile "$OUT/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 50); do
        if python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$port),1); s.sendall(b'PING\r\n'); sys.exit(s.recv(16)!=b'+PONG\r\n')" 2>/dev/null; then
            return 0
        fi
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.1
    done
    stop_pid "$REDIS_PID"
    return 1
}

first_url() { # first_url FILE PID PREFIX: waits up to 30 s for FILE's first line "PREFIX URL"; prints URL
    local file=$1 pid=$2 prefix=$3 line
    for _ in $(seq 300); do
        line=$(head -n 1 "$file" 2>/dev/null || true)
        if [[ $line == "$prefix"* ]]; then
            echo "${line#"$prefix"}"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

start_mock() { # start_mock NAME DELAY_MS: sets MOCK_URL
    local name=$1 delay=$2 pid
    "$MOCK" --delay-ms "$delay" --exit-after 7200 >"$OUT/$name.out" 2>"$OUT/$name.log" &
    pid=$!
    PIDS+=("$pid")
    MOCK_URL=$(first_url "$OUT/$name.out" "$pid" "listening on ") ||
        { echo "board.sh: mock $name did not start (see $OUT/$name.log)" >&2; exit 1; }
}

REDIS_PORT=""
for _ in 1 2 3 4 5; do
    port=$(free_port)
    if start_redis "$port"; then
        REDIS_PORT=$port
        PIDS+=("$REDIS_PID")
        break
    fi
done
[[ -n $REDIS_PORT ]] || { echo "board.sh: redis-server did not start (see $OUT/redis.log)" >&2; exit 1; }
start_mock mock-now 0
NOW_URL=$MOCK_URL
start_mock mock-slow "$DELAY_MS"
SLOW_URL=$MOCK_URL
echo "redis 127.0.0.1:$REDIS_PORT; mock at once $NOW_URL; mock after $DELAY_MS ms $SLOW_URL"

# ---------------------------------------------------------------------------------------------
# One gateway per case; each figure measured on it and on the floor, one after the other.

KEY=llmr-board-key-0123456789abcdef

start_gateway() { # start_gateway CASE: sets GATEWAY_PID and GATEWAY_URL; fails if it does not start
    local case=$1 dir=$OUT/$1 auth=(--no-auth)
    mkdir -p "$dir/state"
    if [[ $case == proxy ]]; then
        start_proxy "$dir"
        return
    fi
    python3 "$REPO/bench/board_config.py" "$case" "$NOW_URL" "$SLOW_URL" "127.0.0.1:$REDIS_PORT" "$KEY" \
        >"$dir/gateway.yaml"
    [[ $case == redis-keyed* ]] && auth=()
    env -u REDIS_URL -u RUST_LOG LLMROUTE_STATE_DIR="$dir/state" BOARD_UPSTREAM_KEY=sk-board \
        "$LLMROUTE" --config "$dir/gateway.yaml" serve "${auth[@]}" --listen 127.0.0.1:0 \
        >"$dir/gateway.out" 2>"$dir/gateway.log" &
    GATEWAY_PID=$!
    if ! GATEWAY_URL=$(first_url "$dir/gateway.out" "$GATEWAY_PID" "llmroute gateway listening on "); then
        stop_pid "$GATEWAY_PID"
        GATEWAY_PID=""
        return 1
    fi
}

start_proxy() { # start_proxy DIR: the reference, bare-proxy, in the gateway's place
    local dir=$1
    "$PROXY" --route "now=$NOW_URL" --route "slow=$SLOW_URL" >"$dir/gateway.out" 2>"$dir/gateway.log" &
    GATEWAY_PID=$!
    if ! GATEWAY_URL=$(first_url "$dir/gateway.out" "$GATEWAY_PID" "listening on "); then
        stop_pid "$GATEWAY_PID"
        GATEWAY_PID=""
        return 1
    fi
}

load() { # load OUTFILE URL [loadgen options...]: one loadgen run, its JSON in OUTFILE
    local out=$1 url=$2
    shift 2
    if ! "$LOADGEN" --url "$url/v1/chat/completions" "$@" >"$out" 2>"$out.err"; then
        echo "board.sh: loadgen failed for $out (see $out and $out.err)" >&2
    fi
}

pair() { # pair CASE NAME [loadgen options...]: the floor, then the gateway (watching its CPU)
    local case=$1 name=$2 dir=$OUT/$1 floor_url=$NOW_URL model=now
    shift 2
    if [[ $name == c32* || $name == c128* ]]; then
        floor_url=$SLOW_URL model=slow
    fi
    local gateway_opts=(--model "$model" --pid "$GATEWAY_PID")
    [[ $case == redis-keyed* ]] && gateway_opts+=(--header "authorization: Bearer $KEY")
    load "$dir/$name-floor.json" "$floor_url" --model "$model" "$@"
    load "$dir/$name-gateway.json" "$GATEWAY_URL" "${gateway_opts[@]}" "$@"
}

run_case() { # run_case CASE
    local case=$1 round
    echo "== $case"
    if ! start_gateway "$case"; then
        echo "board.sh: the gateway did not start for $case; skipped (see $OUT/$case/gateway.log):" >&2
        tail -n 5 "$OUT/$case/gateway.log" >&2 || true
        touch "$OUT/$case/skipped"
        return 0
    fi
    local c1=(--requests "$C1_REQUESTS" --warmup "$C1_WARMUP" --samples)
    for ((round = 1; round <= ROUNDS; round++)); do
        pair "$case" "c1-$round" "${c1[@]}"
        pair "$case" "stream-$round" "${c1[@]}" --stream
    done
    for conns in 32 128; do
        pair "$case" "c$conns" --connections "$conns" --warmup "$LOAD_WARMUP" --duration-secs "$LOAD_SECS"
    done
    stop_pid "$GATEWAY_PID"
    GATEWAY_PID=""
}

STARTED=$(date +%s)
for case in "${CASE_LIST[@]}"; do
    run_case "$case"
done
echo "measured in $(($(date +%s) - STARTED)) s"
python3 "$REPO/bench/board.py" "$OUT" "${CASE_LIST[@]}" | tee "$OUT/board.md"
echo "results: $OUT"
