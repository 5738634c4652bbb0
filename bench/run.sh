#!/usr/bin/env bash
# Run llmroute through the shared benchmark harness, next to its floor (and optionally LiteLLM),
# and print a side-by-side markdown table. See bench/README.md.
#
#   bench/run.sh [--quick | --gateway-only | --chaos | --leases | --slack | --k1 | --cpu | --agents] [--no-build] [--litellm-python PATH]
#
# Environment: LLMROUTE_BENCH_HARNESS (default <repo>/../shared/bench), OUT (default a new
# temporary directory), CARGO_TARGET_DIR (honoured for the build and the worker's path).
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/run.sh [--quick | --gateway-only | --chaos | --leases | --slack | --k1 | --cpu | --agents] [--no-build] [--litellm-python PATH]

  --quick                only the floor and llmroute K=4 (enforce mock, inside one minute): a smoke test
  --gateway-only         only the floor and llmroute serve with K=4 reference workers (enforce mock)
  --chaos                only the floor and llmroute K=4 (enforce mock) while Redis is killed 10 s
                         into the run and restarted empty 10 s later: once with ledger.on_error
                         closed, once with local (both with ledger.timeout_ms 15)
  --leases               20 requests/s per instance for 60 s on providers with 20x the harness's
                         limits (bench/providers-x20.json), observe mock: K=4 without leases, then
                         K=4 and K=8 with `lease: auto` on every deployment
  --slack                only the floor and the slack load (90 requests / 30 s, K=4, enforce mock), three
                         times: its cost ratio moves by 0.5 % with one request's placement
  --k1                   only the floor and llmroute K=1 (enforce mock) three times: one instance
                         must place every request where the greedy oracle does
  --cpu                  the floor and llmroute K=4 (enforce mock) three times each, in the order
                         floor, router, router, floor, floor, router, so that a machine's drift
                         during the runs weighs on both alike; prints CPU per request run by run
  --agents               instead of the harness: agent traffic (bench/agents/run.py): Claude Code- and
                         Codex-shaped sessions straight to a mock enforcing Anthropic's ITPM and OTPM,
                         then through llmroute serve (with --quick: its quick set)
  --no-build             do not run cargo; use the bench_worker already built
  --litellm-python PATH  also run the LiteLLM peer (usage-based-routing-v2, K=4) with this venv python
  -h, --help             this text

Environment: LLMROUTE_BENCH_HARNESS (harness dir, default <repo>/../shared/bench),
OUT (results dir, default a new mktemp -d), CARGO_TARGET_DIR, LLMROUTE_BENCH_LEASE (a `lease:`
value, e.g. auto, given to every deployment in the llmroute and gateway runs of the default, --quick,
--slack, --k1, --cpu and --gateway-only sets), LLMROUTE_BENCH_RUNTIME (current, the default: every
bench_worker on Tokio's current-thread runtime; multi: on the multi-thread one).
EOF
}

QUICK=0
GATEWAY_ONLY=0
CHAOS=0
LEASES=0
SLACK=0
K1=0
CPU=0
AGENTS=0
BUILD=1
LITELLM_PY=""
while (($#)); do
    case "$1" in
        --quick) QUICK=1 ;;
        --gateway-only) GATEWAY_ONLY=1 QUICK=1 ;;
        --chaos) CHAOS=1 QUICK=1 ;;
        --leases) LEASES=1 ;;
        --slack) SLACK=1 QUICK=1 ;;
        --k1) K1=1 QUICK=1 ;;
        --cpu) CPU=1 QUICK=1 ;;
        --agents) AGENTS=1 ;;
        --no-build) BUILD=0 ;;
        --litellm-python)
            [[ $# -ge 2 ]] || { echo "run.sh: --litellm-python needs a PATH" >&2; exit 2; }
            LITELLM_PY=$2
            shift
            ;;
        --litellm-python=*) LITELLM_PY=${1#*=} ;;
        -h | --help) usage; exit 0 ;;
        *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${LLMROUTE_BENCH_HARNESS:-$REPO/../shared/bench}
for f in drive_cmd.py mock_upstream.py report.py providers.json; do
    if [[ ! -f $HARNESS/$f ]]; then
        echo "run.sh: no benchmark harness at '$HARNESS' (missing $f)." >&2
        echo "        Set LLMROUTE_BENCH_HARNESS to the directory holding drive_cmd.py and mock_upstream.py." >&2
        exit 1
    fi
done
HARNESS=$(cd "$HARNESS" && pwd)
PROVIDERS=$HARNESS/providers.json
((LEASES)) && PROVIDERS=$REPO/bench/providers-x20.json
command -v redis-server >/dev/null || { echo "run.sh: redis-server is not installed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "run.sh: python3 is not installed" >&2; exit 1; }
if [[ -n $LITELLM_PY ]]; then
    "$LITELLM_PY" -c 'import litellm, redis' 2>/dev/null || {
        echo "run.sh: '$LITELLM_PY' cannot import litellm and redis" >&2
        exit 1
    }
fi

TARGET=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET == /* ]] || TARGET=$REPO/$TARGET
# The `dist` profile (whole-program LTO): what every measurement is made with.
WORKER=$TARGET/dist/examples/bench_worker
LLMROUTE=$TARGET/dist/llmroute
if ((BUILD)); then
    (cd "$REPO" && cargo build --profile dist -p router-sdk --example bench_worker && cargo build --profile dist -p router-cli)
fi
[[ -x $WORKER ]] || { echo "run.sh: no worker at $WORKER (drop --no-build?)" >&2; exit 1; }
[[ -x $LLMROUTE ]] || { echo "run.sh: no llmroute at $LLMROUTE (drop --no-build?)" >&2; exit 1; }

OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/llmroute-bench.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "results: $OUT"

if ((AGENTS)); then
    quick=()
    ((QUICK)) && quick=(--quick)
    exec python3 "$REPO/bench/agents/run.py" "${quick[@]}" --llmroute "$LLMROUTE" --out "$OUT/agents"
fi

# ---------------------------------------------------------------------------------------------
# Our own Redis and mocks; everything started here is stopped on exit, by pid.

PIDS=()      # redis-server and the mocks
DRIVER=""    # the running driver, leader of its own process group (its workers included)

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
    if [[ -n $DRIVER ]]; then
        kill -TERM -- "-$DRIVER" 2>/dev/null || true
        sleep 0.5
        kill -KILL -- "-$DRIVER" 2>/dev/null || true
        wait "$DRIVER" 2>/dev/null || true
    fi
    for pid in "${PIDS[@]}"; do
        stop_pid "$pid"
    done
    # A Redis restarted by a chaos run.
    if [[ -s $OUT/redis-restarted.pid ]]; then
        stop_pid "$(cat "$OUT/redis-restarted.pid")"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Lifetime bound for the mocks, in case this script is killed with SIGKILL.
EXIT_AFTER=$((QUICK && !CPU ? 600 : 1800))

start_redis() { # start_redis PORT: an empty redis-server on PORT; sets REDIS_PID; fails if it does not answer
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

REDIS_PORT=""
for _ in 1 2 3 4 5; do
    port=$(free_port)
    if start_redis "$port"; then
        REDIS_PORT=$port
        PIDS+=("$REDIS_PID")
        break
    fi
done
[[ -n $REDIS_PORT ]] || { echo "run.sh: redis-server did not start (see $OUT/redis.log)" >&2; exit 1; }
REDIS=127.0.0.1:$REDIS_PORT

start_mock() { # start_mock NAME [--observe]: sets MOCK_URL
    local name=$1 pid i
    shift
    rm -f "$OUT/$name.port"
    python3 "$HARNESS/mock_upstream.py" --config "$PROVIDERS" --port 0 --port-file "$OUT/$name.port" \
        --exit-after "$EXIT_AFTER" "$@" >"$OUT/$name.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for ((i = 0; i < 100; i++)); do
        if [[ -s $OUT/$name.port ]]; then
            MOCK_URL=http://127.0.0.1:$(cat "$OUT/$name.port")
            if python3 -c "import urllib.request; urllib.request.urlopen('$MOCK_URL/healthz', timeout=1)" 2>/dev/null; then
                return 0
            fi
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "run.sh: the $name mock did not start (see $OUT/$name.log)" >&2
    exit 1
}
start_mock mock-enforce
ENFORCE=$MOCK_URL
OBSERVE=""
if ((!QUICK)); then
    start_mock mock-observe --observe
    OBSERVE=$MOCK_URL
fi
echo "redis $REDIS, enforce mock $ENFORCE${OBSERVE:+, observe mock $OBSERVE}"

# ---------------------------------------------------------------------------------------------
# The runs. Each waits for its place in the UTC minute (--align), then offers its load.

# The gateway: `llmroute serve` over the enforce mock's providers, its ledger in our Redis.
start_gateway() { # sets GATEWAY_URL
    local i
    python3 "$REPO/bench/gateway_config.py" "$PROVIDERS" "$ENFORCE" "$REDIS" >"$OUT/gateway.yaml"
    BENCH_KEY=bench "$LLMROUTE" --config "$OUT/gateway.yaml" serve --no-auth --listen 127.0.0.1:0 \
        >"$OUT/gateway.out" 2>"$OUT/gateway.log" &
    PIDS+=("$!")
    for ((i = 0; i < 100; i++)); do
        if grep -q '^llmroute gateway listening on ' "$OUT/gateway.out" 2>/dev/null; then
            GATEWAY_URL=$(sed -n 's/^llmroute gateway listening on //p' "$OUT/gateway.out")/v1
            return 0
        fi
        sleep 0.1
    done
    echo "run.sh: the gateway did not start (see $OUT/gateway.log)" >&2
    exit 1
}

gateway_runs() { # the reference worker's floor, then the same worker through llmroute serve
    start_gateway
    printf -v WORKER_CMD '%q ' python3 "$HARNESS/naive_worker.py" --policy fixed:premium
    bench floor-py-k4 "floor (reference worker, no router) K=4" "$ENFORCE" 600 inside 4
    printf -v WORKER_CMD '%q ' python3 "$REPO/bench/gateway_worker.py" --harness "$HARNESS" --gateway "$GATEWAY_URL"
    bench gateway-k4 "llmroute serve, K=4 reference workers" "$ENFORCE" 600 inside 4
    WORKER_CMD=""
}

FAILED=()
bench() { # bench DIR LABEL MOCK_URL N ALIGN K WORKER_ARGS...; WORKER_CMD, if set, is the worker
    local dir=$1 label=$2 mock=$3 n=$4 align=$5 k=$6 rc=0
    shift 6
    local cmd mode=enforce
    [[ $mock == "$ENFORCE" ]] || mode=observe
    if [[ -n ${WORKER_CMD:-} ]]; then
        cmd="$WORKER_CMD "
    else
        printf -v cmd '%q ' "$WORKER" "$@"
    fi
    echo
    echo "== $label: $n requests / ${DURATION:-30} s, K=$k, $mode mock, align $align  (from $(date -u +%T) UTC)"
    setsid python3 "$HARNESS/drive_cmd.py" --mock-url "$mock" --redis "$REDIS" --providers "$PROVIDERS" \
        -k "$k" -n "$n" --duration "${DURATION:-30}" --align "$align" --label "$label" --out "$OUT/$dir" \
        --worker-cmd "${cmd}--spec {spec} --out {out}" >"$OUT/$dir.log" 2>&1 &
    DRIVER=$!
    wait "$DRIVER" || rc=$?
    DRIVER=""
    if ((rc != 0)) || [[ ! -f $OUT/$dir/summary.json ]]; then
        echo "   FAILED (exit $rc); see $OUT/$dir.log and $OUT/$dir/worker*.log" >&2
        FAILED+=("$dir")
    else
        # Script calls (EVALSHA, EVAL) since the driver's CONFIG RESETSTAT, which precedes the
        # workers' start: their warm-up requests (two per worker) are included.
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" INFO commandstats |
            awk -F'[:=,]' '/^cmdstat_(evalsha|eval):/ { n += $3 } END { printf "{\"script_calls\": %d}\n", n }' \
            >"$OUT/$dir/scripts.json" || true
        python3 - "$OUT/$dir/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
ra = s["router_added_ms_single_attempt"]
print(f"   ok {s['succeeded']}/{s['requests']}, upstream 429 {s['upstream_429']}, "
      f"would-be 429 {s['upstream_would_reject_429']}, router-added p50 {ra['p50']} ms, p99 {ra['p99']} ms")
EOF
    fi || true
}

peer() { # peer DIR: the LiteLLM peer, usage-based-routing-v2, K=4, on the enforce mock
    local dir=$1 rc=0
    echo
    echo "== LiteLLM usage-based-routing-v2 K=4: 600 requests / 30 s, enforce mock, align inside  (from $(date -u +%T) UTC)"
    setsid "$LITELLM_PY" "$HARNESS/litellm_peer.py" run --python "$LITELLM_PY" --strategy usage-based-routing-v2 \
        -k 4 -n 600 --duration 30 --align inside --mock-url "$ENFORCE" --redis "$REDIS" \
        --providers "$PROVIDERS" --out "$OUT/$dir" >"$OUT/$dir.log" 2>&1 &
    DRIVER=$!
    wait "$DRIVER" || rc=$?
    DRIVER=""
    if ((rc != 0)) || [[ ! -f $OUT/$dir/summary.json ]]; then
        echo "   FAILED (exit $rc); see $OUT/$dir.log" >&2
        FAILED+=("$dir")
    fi
}

# Kills Redis 10 s after the run's first request reaches the mock, and restarts it empty on the
# same port 10 s later (the workers keep going). Runs in the background of one bench run.
chaos_disrupt() {
    local pid i
    # The run's driver resets the mock first (the previous run's requests must not count), then
    # the run's first request arrives: the outage is timed from that request.
    for ((i = 0; i < 1800; i++)); do
        python3 "$REPO/bench/mock_started.py" "$ENFORCE" --reset 2>/dev/null && break
        sleep 0.1
    done
    for ((i = 0; i < 1800; i++)); do
        python3 "$REPO/bench/mock_started.py" "$ENFORCE" 2>/dev/null && break
        sleep 0.1
    done
    sleep 10
    pid=$(cat "$OUT/redis-restarted.pid" 2>/dev/null || echo "${PIDS[0]}")
    kill -KILL "$pid" 2>/dev/null || true
    echo "   $(date -u +%T) Redis killed"
    sleep 10
    start_redis "$REDIS_PORT" || { echo "run.sh: redis-server did not restart" >&2; return 1; }
    echo "$REDIS_PID" >"$OUT/redis-restarted.pid"
    echo "   $(date -u +%T) Redis restarted empty"
}

chaos_runs() {
    local mode pid
    for mode in closed local; do
        chaos_disrupt &
        pid=$!
        bench "chaos-$mode" "llmroute K=4, Redis killed at 10 s, restarted empty at 20 s, on_error $mode" \
            "$ENFORCE" 600 inside 4 --ledger "{ timeout_ms: 15, on_error: $mode }"
        wait "$pid" || true
    done
}

three_runs() { # three_runs DIR LABEL N K: after the floor, one llmroute case three times (enforce mock)
    local i
    ORDER=(floor-k4)
    for i in 1 2 3; do
        bench "$1-$i" "$2, run $i" "$ENFORCE" "$3" inside "$4" "${LEASE_ARGS[@]}"
        ORDER+=("$1-$i")
    done
}

LEASE_ARGS=()
[[ -n ${LLMROUTE_BENCH_LEASE:-} ]] && LEASE_ARGS=(--lease "$LLMROUTE_BENCH_LEASE")

T0=$(date +%s)
# Inside- and cross-aligned runs alternate where possible: a cross run starts 15 s before a
# minute boundary, just after an inside run, so fewer minutes are spent waiting.
bench floor-k4 "floor (no router) K=4" "$ENFORCE" 600 inside 4 --floor
if ((LEASES)); then
    DURATION=60
    bench leases-k4-off "llmroute K=4, 20 req/s each, no leases" "$OBSERVE" 4800 none 4
    bench leases-k4-auto "llmroute K=4, 20 req/s each, lease: auto" "$OBSERVE" 4800 none 4 --lease auto
    bench leases-k8-auto "llmroute K=8, 20 req/s each, lease: auto" "$OBSERVE" 9600 none 8 --lease auto
    ORDER=(floor-k4 leases-k4-off leases-k4-auto leases-k8-auto)
elif ((CHAOS)); then
    chaos_runs
    ORDER=(floor-k4 chaos-closed chaos-local)
elif ((CPU)); then
    ORDER=(floor-k4)
    for run in router-1 router-2 floor-2 floor-3 router-3; do
        if [[ $run == floor-* ]]; then
            bench "$run-k4" "floor (no router) K=4, run ${run#floor-}" "$ENFORCE" 600 inside 4 --floor
        else
            bench "llmroute-k4-${run#router-}" "llmroute K=4, run ${run#router-}" "$ENFORCE" 600 inside 4 "${LEASE_ARGS[@]}"
        fi
    done
    ORDER+=(llmroute-k4-1 llmroute-k4-2 llmroute-k4-3 floor-2-k4 floor-3-k4)
elif ((SLACK)); then
    three_runs llmroute-k4-slack "llmroute K=4 slack (90 req)" 90 4
elif ((K1)); then
    three_runs llmroute-k1 "llmroute K=1" 600 1
elif ((GATEWAY_ONLY)); then
    gateway_runs
    ORDER=(floor-k4)
elif ((QUICK)); then
    bench llmroute-k4 "llmroute K=4" "$ENFORCE" 600 inside 4 "${LEASE_ARGS[@]}"
    ORDER=(floor-k4 llmroute-k4)
else
    bench llmroute-k4-observe-cross "llmroute K=4 (observe, cross)" "$OBSERVE" 600 cross 4 "${LEASE_ARGS[@]}"
    bench llmroute-k1 "llmroute K=1" "$ENFORCE" 600 inside 1 "${LEASE_ARGS[@]}"
    bench llmroute-k8-observe-cross "llmroute K=8 (observe, cross)" "$OBSERVE" 600 cross 8 "${LEASE_ARGS[@]}"
    bench llmroute-k4 "llmroute K=4" "$ENFORCE" 600 inside 4 "${LEASE_ARGS[@]}"
    # A second floor, for the runs after this point: a VM's speed can change within minutes.
    bench floor-2-k4 "floor (no router) K=4, run 2" "$ENFORCE" 600 inside 4 --floor
    bench llmroute-k4-observe-inside "llmroute K=4 (observe, inside)" "$OBSERVE" 600 inside 4 "${LEASE_ARGS[@]}"
    bench llmroute-k8-observe-inside "llmroute K=8 (observe, inside)" "$OBSERVE" 600 inside 8 "${LEASE_ARGS[@]}"
    bench llmroute-k4-slack "llmroute K=4 slack (90 req)" "$ENFORCE" 90 inside 4 "${LEASE_ARGS[@]}"
    gateway_runs
    ORDER=(floor-k4 llmroute-k1 llmroute-k4 llmroute-k4-observe-inside llmroute-k8-observe-inside
        llmroute-k4-observe-cross llmroute-k8-observe-cross llmroute-k4-slack floor-2-k4)
    if [[ -n $LITELLM_PY ]]; then
        peer litellm-ubr2-k4
        ORDER+=(litellm-ubr2-k4)
    fi
fi
ELAPSED=$(($(date +%s) - T0))

DIRS=()
for d in "${ORDER[@]}"; do DIRS+=("$OUT/$d"); done
{
    echo
    echo "## Runs (harness report.py)"
    echo
    python3 "$HARNESS/report.py" "${DIRS[@]}"
    echo
    echo "## Router overhead = router-added latency - the floor's (single-attempt successes)"
    echo
    # Every floor run is a reference; each other run is compared with the nearest in time.
    FLOOR_ARGS=() RUNS=()
    for d in "${ORDER[@]}"; do
        if [[ $d == floor-* ]]; then FLOOR_ARGS+=(--floor "$OUT/$d"); else RUNS+=("$OUT/$d"); fi
    done
    if ((${#RUNS[@]})); then
        python3 "$REPO/bench/summarize.py" "${FLOOR_ARGS[@]}" "${RUNS[@]}"
    fi
    echo
    echo "## The slow end of router-added latency (single-attempt successes)"
    echo
    python3 "$REPO/bench/summarize.py" --tails "${DIRS[@]}"
    if ((CPU)); then
        echo
        echo "## CPU per request, floor and router runs alternated"
        echo
        python3 "$REPO/bench/summarize.py" --cpu-pairs "$OUT/floor-k4" "$OUT/llmroute-k4-1" "$OUT/llmroute-k4-2" \
            "$OUT/floor-2-k4" "$OUT/floor-3-k4" "$OUT/llmroute-k4-3"
    fi
    if [[ -f $OUT/gateway-k4/summary.json ]]; then
        echo
        echo "## Gateway overhead = router-added latency of the reference workers through llmroute serve - the same workers' straight to the mock"
        echo
        python3 "$HARNESS/report.py" "$OUT/floor-py-k4" "$OUT/gateway-k4"
        echo
        python3 "$REPO/bench/summarize.py" --floor "$OUT/floor-py-k4" "$OUT/gateway-k4"
    fi
    echo
    echo "Runs took $((ELAPSED / 60)) min $((ELAPSED % 60)) s. Results: $OUT"
} | tee "$OUT/report.md"
if ((${#FAILED[@]})); then
    echo "run.sh: failed runs: ${FAILED[*]}" >&2
    exit 1
fi
