//! Test and measurement helper: hammers a ledger.
//!
//! `ledger-hammer <ledger.db> <config.yaml> <model> <tokens> <attempts> <now-ms>`
//!
//! One OS process on a shared SQLite ledger, for the multi-process test: opens the ledger,
//! prints `ready`, waits for a line on standard input (so that every process starts together),
//! then tries `attempts` admissions of `tokens` on `model` with the clock fixed at `now-ms` (all
//! processes agree on the time, so the expected count is exact), keeps every reservation, and
//! prints the number granted.
//!
//! `ledger-hammer throughput <cluster|server|URL> <namespaces> <seconds> [<in-flight>]`
//!
//! How many admission decisions per second Redis sustains: `namespaces` namespaces (one
//! `RedisStore` each, on one deployment whose limits never bind), each with `in-flight` tasks
//! (default 64) that admit and settle in a loop for `seconds`. `cluster` starts a three-primary
//! Redis Cluster and puts each namespace on a shard of its own (at most three); `server` starts
//! one redis-server; a URL uses that Redis. Prints decisions per second, and per node the
//! script calls it ran, their mean cost inside Redis and the node's CPU time, so that decisions
//! per CPU-second of a shard can be read off even when the client shares the machine.
#![forbid(unsafe_code)]

use std::error::Error;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use llmroute_tests::{TestRedis, on_node, redis_cluster_own, redis_server};
use router_core::clock::ManualClock;
use router_core::config::Registry;
use router_core::ledger::{
    ActualUsage, Admission, Ledger, Need, RedisStore, RedisStoreOptions, SqliteStore,
};

const USAGE: &str = "usage: ledger-hammer <ledger.db> <config.yaml> <model> <tokens> <attempts> \
    <now-ms>\n   or: ledger-hammer throughput <cluster|server|URL> <namespaces> <seconds> \
    [<in-flight>]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("throughput") => throughput(&args[1..]),
        _ => hammer(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger-hammer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn hammer(args: &[String]) -> Result<(), Box<dyn Error>> {
    let [db, config, model, tokens, attempts, now] = args else {
        return Err(USAGE.into());
    };
    let (tokens, attempts, now): (u64, usize, u64) =
        (tokens.parse()?, attempts.parse()?, now.parse()?);
    let registry = Registry::from_yaml_str(&std::fs::read_to_string(config)?, config)?;
    let candidates = registry.resolve(model);
    if candidates.is_empty() {
        return Err(format!("no deployment serves {model}").into());
    }
    let clock = Arc::new(ManualClock::new(now));
    let store = SqliteStore::open(&PathBuf::from(db), &registry, clock)?;

    println!("ready");
    std::io::stdout().flush()?;
    std::io::stdin().lock().read_line(&mut String::new())?;

    let need = Need::new(tokens, Duration::from_secs(600));
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let granted = runtime.block_on(async {
        let mut granted = 0usize;
        for _ in 0..attempts {
            let need = need.clone().with_new_id();
            if let Admission::Granted(_kept) = store.admit(&need, &candidates).await? {
                granted += 1;
            }
        }
        Ok::<_, Box<dyn Error>>(granted)
    })?;
    println!("{granted}");
    Ok(())
}

/// One deployment whose limits never bind, so every decision is a full check and a grant.
const ROOMY: &str = r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    models:
      - name: m
        price: { input: 1, output: 1 }
        limits: { rpm: 1000000000, tpm: 1000000000000, concurrency: 1000000 }
"#;

fn throughput(args: &[String]) -> Result<(), Box<dyn Error>> {
    let (target, namespaces, seconds, in_flight) = match args {
        [t, n, s] => (t, n.parse::<usize>()?, s.parse::<u64>()?, 64),
        [t, n, s, f] => (t, n.parse()?, s.parse()?, f.parse::<usize>()?),
        _ => return Err(USAGE.into()),
    };
    if namespaces == 0 || in_flight == 0 {
        return Err("namespaces and in-flight must be at least 1".into());
    }
    let Target {
        url,
        spread,
        nodes,
        _servers,
    } = Target::new(target, namespaces);
    let registry = Registry::from_yaml_str(ROOMY, "roomy.yaml")?;
    let d = registry.resolve("m")[0];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let shown = router_core::config::redact_url(&url);
    println!("target: {shown}");
    for (ns, node) in &spread {
        match node {
            Some(n) => println!("namespace {ns} on node {n} ({})", nodes[*n]),
            None => println!("namespace {ns}"),
        }
    }
    let before: Vec<NodeStats> = nodes.iter().map(|n| NodeStats::read(n)).collect();
    let decisions = runtime.block_on(async {
        let mut stores = Vec::new();
        for (ns, _) in &spread {
            let options = RedisStoreOptions {
                namespace: ns.clone(),
                response_timeout: Duration::from_secs(5),
                ..RedisStoreOptions::default()
            };
            stores.push(Arc::new(
                RedisStore::connect(&url, &registry, options).await?,
            ));
        }
        // Load the scripts before timing.
        for store in &stores {
            decide(store, d).await?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Vec<Arc<AtomicU64>> = stores.iter().map(|_| Arc::default()).collect();
        let mut tasks = Vec::new();
        for (store, count) in stores.iter().zip(&counts) {
            for _ in 0..in_flight {
                let (store, count, stop) = (store.clone(), count.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        decide(&store, d).await?;
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, Box<dyn Error + Send + Sync>>(())
                }));
            }
        }
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let elapsed = started.elapsed();
        for task in tasks {
            task.await??;
        }
        let per_ns: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        Ok::<_, Box<dyn Error + Send + Sync>>((per_ns, elapsed))
    });
    let (per_ns, elapsed) = decisions.map_err(|e| e.to_string())?;
    let secs = elapsed.as_secs_f64();
    let total: u64 = per_ns.iter().sum();
    println!(
        "{namespaces} namespace(s) x {in_flight} in flight, {secs:.1} s: {total} decisions \
         (admit + settle), {:.0} decisions/s",
        total as f64 / secs
    );
    for ((ns, _), n) in spread.iter().zip(&per_ns) {
        println!("  {ns}: {:.0} decisions/s", *n as f64 / secs);
    }
    for (i, (node, was)) in nodes.iter().zip(&before).enumerate() {
        let now = NodeStats::read(node);
        let calls = now.evalsha_calls.saturating_sub(was.evalsha_calls);
        let usec = now.evalsha_usec.saturating_sub(was.evalsha_usec);
        let cpu = now.cpu_secs - was.cpu_secs;
        if calls == 0 {
            println!("  node {i}: no script call");
            continue;
        }
        println!(
            "  node {i}: {calls} script calls, {:.1} us each inside Redis, {cpu:.2} CPU s \
             ({:.0}% of one core): {:.0} decisions per CPU-second",
            usec as f64 / calls as f64,
            100.0 * cpu / secs,
            calls as f64 / 2.0 / cpu
        );
    }
    Ok(())
}

/// What to hammer: a Redis URL, the namespaces (each with its node, when known) and the nodes'
/// own URLs (empty for a Redis given by URL).
struct Target {
    url: String,
    spread: Vec<(String, Option<usize>)>,
    nodes: Vec<String>,
    /// Servers started here, stopped when this drops.
    _servers: Option<TestRedis>,
}

impl Target {
    fn new(kind: &str, namespaces: usize) -> Self {
        match kind {
            "cluster" => {
                let c = redis_cluster_own();
                let spread = if namespaces <= c.nodes.len() {
                    c.namespaces_on_distinct_nodes(namespaces)
                        .into_iter()
                        .map(|(ns, node)| (ns, Some(node)))
                        .collect()
                } else {
                    (0..namespaces)
                        .map(|i| {
                            let ns = format!("{}-{i}", c.namespace);
                            let node = c.node_of(&ns);
                            (ns, Some(node))
                        })
                        .collect()
                };
                Self {
                    url: c.url.clone(),
                    spread,
                    nodes: c.nodes.clone(),
                    _servers: Some(c),
                }
            }
            "server" => {
                let s = redis_server();
                // `REDIS_URL` (no redis-server here) has no node of its own to read.
                let node = (!s.nodes.is_empty()).then_some(0);
                let spread = (0..namespaces)
                    .map(|i| (format!("{}-{i}", s.namespace), node))
                    .collect();
                Self {
                    url: s.url.clone(),
                    spread,
                    nodes: s.nodes.clone(),
                    _servers: Some(s),
                }
            }
            url => Self {
                url: url.to_owned(),
                spread: (0..namespaces)
                    .map(|i| (format!("hammer-{:08x}-{i}", fastrand::u32(..)), None))
                    .collect(),
                nodes: Vec::new(),
                _servers: None,
            },
        }
    }
}

/// One decision as a request makes it: admit, then settle what was used.
async fn decide(
    store: &RedisStore,
    d: router_core::config::DeploymentId,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let need = Need::new(700, Duration::from_secs(600));
    match store.admit(&need, &[d]).await? {
        Admission::Granted(r) => {
            store.settle(&r, ActualUsage::tokens(650)).await?;
            Ok(())
        }
        Admission::Denied(denial) => {
            Err(format!("the roomy deployment refused: {denial:?}").into())
        }
    }
}

/// A node's script calls (EVALSHA: admit and settle) and CPU time so far.
struct NodeStats {
    evalsha_calls: u64,
    evalsha_usec: u64,
    cpu_secs: f64,
}

impl NodeStats {
    fn read(node: &str) -> Self {
        let info: String = on_node(node, redis::cmd("INFO").arg("all"));
        let field = |line: &str, name: &str| -> Option<u64> {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
        };
        let mut stats = NodeStats {
            evalsha_calls: 0,
            evalsha_usec: 0,
            cpu_secs: 0.0,
        };
        for line in info.lines() {
            if line.starts_with("cmdstat_evalsha:") {
                stats.evalsha_calls = field(line, "calls").unwrap_or(0);
                stats.evalsha_usec = field(line, "usec").unwrap_or(0);
            }
            // The main thread's: the one that runs scripts.
            for key in ["used_cpu_sys_main_thread:", "used_cpu_user_main_thread:"] {
                if let Some(v) = line.strip_prefix(key) {
                    stats.cpu_secs += v.trim().parse::<f64>().unwrap_or(0.0);
                }
            }
        }
        stats
    }
}
