//! Test support for llmroute: a throwaway Redis server, or Redis Cluster, per test.
//!
//! [`redis_server`] starts `redis-server` on a free port, persisting nothing, and stops it when
//! the guard drops. Without `redis-server` on `PATH` it falls back to `REDIS_URL`; with neither it
//! fails the test with instructions. It never skips silently.
//!
//! [`redis_cluster_own`] starts three `redis-server --cluster-enabled yes` on free ports, joins
//! them with `redis-cli --cluster create` (three primaries, no replicas), waits until every node
//! says `cluster_state:ok`, and stops them all when the guard drops. [`redis_cluster`] shares one
//! such cluster among the tests of a process that run at the same time (`redis-cli` takes about
//! two seconds to form one); it stops when the last of them ends. Without `redis-server` and
//! `redis-cli` both fail with instructions.
//!
//! [`TestPostgres`] gives a PostgreSQL server (`PG_URL`, else the local one) and a schema name
//! of the test's own, dropped with the guard; an unreachable server fails the test with
//! instructions. [`Gate`] forwards TCP to a server and can be closed, paused and opened again, so
//! a test can make the server unreachable or silent while it keeps running. [`Logs`] records
//! what a test's code logs; [`breaking_upstream`] breaks its connection mid-stream;
//! [`otlp::Collector`] takes OTLP/HTTP trace exports.
#![forbid(unsafe_code)]

pub mod breaking;
pub mod enforcer;
pub mod gate;
pub mod logs;
pub mod otlp;
pub mod postgres;

pub use breaking::breaking_upstream;
pub use gate::Gate;
pub use logs::Logs;
pub use postgres::TestPostgres;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// A Redis to test against, and a key namespace of this test's own.
#[derive(Debug)]
pub struct TestRedis {
    /// The URL to connect to.
    pub url: String,
    /// A namespace no other test uses.
    pub namespace: String,
    /// True when this guard started the server (and so owns all of its state and statistics).
    pub owned: bool,
    /// Each server's own URL (`redis://127.0.0.1:port/0`): the one server, or every node of a
    /// cluster (for `CLUSTER` and `INFO` commands on each). Empty for `REDIS_URL`.
    pub nodes: Vec<String>,
    /// The servers, stopped when the last guard holding them drops.
    _servers: Option<Arc<Servers>>,
}

/// Server processes and a directory of their own, stopped and removed on drop.
#[derive(Debug)]
struct Servers {
    children: Vec<Child>,
    dir: Option<PathBuf>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

const HOW_TO_INSTALL: &str = "these tests need Redis: install it (`apt-get install redis-server`, \
    or `brew install redis`) so that `redis-server` is on PATH, or set REDIS_URL to a Redis 7 \
    server the tests may write to (e.g. REDIS_URL=redis://127.0.0.1:6379)";

/// Starts a throwaway Redis server (or uses `REDIS_URL` when `redis-server` is not on PATH).
///
/// # Panics
///
/// When neither is available, with a message saying how to install Redis.
pub fn redis_server() -> TestRedis {
    let namespace = format!("test-{:016x}", fastrand::u64(..));
    for _ in 0..5 {
        match spawn() {
            Ok(Some((child, url))) => {
                return TestRedis {
                    nodes: vec![url.clone()],
                    url,
                    namespace,
                    owned: true,
                    _servers: Some(Arc::new(Servers {
                        children: vec![child],
                        dir: None,
                    })),
                };
            }
            Ok(None) => break,
            // Another process took the port between choosing and binding it: try another.
            Err(_) => continue,
        }
    }
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => TestRedis {
            url,
            namespace,
            owned: false,
            nodes: Vec::new(),
            _servers: None,
        },
        _ => panic!("{HOW_TO_INSTALL}"),
    }
}

impl TestRedis {
    /// The port of a server this guard started.
    fn port(&self) -> u16 {
        assert!(
            self.owned,
            "only a server the test started can be stopped and restarted"
        );
        self.url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("the test server's URL names its port")
    }

    /// Kills the server (SIGKILL): every connection drops and its data is gone.
    ///
    /// # Panics
    ///
    /// When this guard did not start the server (`REDIS_URL`).
    pub fn kill(&mut self) {
        for mut child in self.own_server().children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The one server this guard started (not a cluster, not `REDIS_URL`).
    fn own_server(&mut self) -> &mut Servers {
        self.port();
        self._servers
            .as_mut()
            .and_then(Arc::get_mut)
            .filter(|s| s.dir.is_none())
            .expect("a single server of this test's own")
    }

    /// Starts an empty server on the same port again, after [`TestRedis::kill`].
    ///
    /// # Panics
    ///
    /// When it does not come up.
    pub fn restart(&mut self) {
        let port = self.port();
        self.kill();
        match spawn_on(port, &[], &std::env::temp_dir()) {
            Ok(Some((child, _))) => self.own_server().children.push(child),
            other => panic!("redis-server did not restart on port {port}: {other:?}"),
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Wakes a server frozen by [`TestRedis::pause`] (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        self.port();
        let pid = self
            ._servers
            .as_ref()
            .and_then(|s| s.children.first())
            .expect("the server is running")
            .id();
        let status = Command::new("kill")
            .args([which, &pid.to_string()])
            .status()
            .expect("`kill` runs");
        assert!(status.success(), "kill {which} {pid} failed");
    }
}

/// `Ok(None)`: no `redis-server` binary. `Err`: it started but did not come up.
fn spawn() -> Result<Option<(Child, String)>, String> {
    let port = free_port()?;
    spawn_on(port, &[], &std::env::temp_dir())
}

/// A port nothing listens on right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Starts `redis-server` on `port` with `extra` arguments, persisting nothing, in `dir`.
fn spawn_on(
    port: u16,
    extra: &[&str],
    dir: &std::path::Path,
) -> Result<Option<(Child, String)>, String> {
    let spawned = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
        ])
        .args(["no", "--daemonize", "no", "--logfile", ""])
        .args(extra)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    // The server says when it is ready; read its log rather than polling the port.
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("Ready to accept connections"));
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "redis-server on port {port} exited before it was ready"
        ));
    }
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(Some((child, format!("redis://127.0.0.1:{port}/0"))))
}

const HOW_TO_INSTALL_CLUSTER: &str = "the Redis Cluster tests need `redis-server` and \
    `redis-cli` (Redis 7) on PATH: install them (`apt-get install redis-server redis-tools`, or \
    `brew install redis`); the tests start a three-node cluster on free ports themselves";

/// Primaries of a test cluster.
pub const CLUSTER_NODES: usize = 3;

/// A Redis Cluster of [`CLUSTER_NODES`] primaries, shared by the tests of this process that run
/// at the same time (each in a namespace of its own); `owned` is false. Tests that count
/// commands or flush scripts take [`redis_cluster_own`].
///
/// # Panics
///
/// As [`redis_cluster_own`].
pub fn redis_cluster() -> TestRedis {
    /// The running shared cluster, if a test still holds it.
    struct Shared {
        servers: Weak<Servers>,
        url: String,
        nodes: Vec<String>,
    }
    static SHARED: Mutex<Option<Shared>> = Mutex::new(None);
    let namespace = format!("test-{:016x}", fastrand::u64(..));
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(running) = shared.as_ref()
        && let Some(servers) = running.servers.upgrade()
    {
        return TestRedis {
            url: running.url.clone(),
            namespace,
            owned: false,
            nodes: running.nodes.clone(),
            _servers: Some(servers),
        };
    }
    let mut cluster = redis_cluster_own();
    cluster.owned = false;
    if let Some(servers) = &cluster._servers {
        *shared = Some(Shared {
            servers: Arc::downgrade(servers),
            url: cluster.url.clone(),
            nodes: cluster.nodes.clone(),
        });
    }
    cluster
}

/// Starts a throwaway Redis Cluster of [`CLUSTER_NODES`] primaries on free ports (no replicas,
/// persisting nothing, node files in a directory of its own) and waits until every node says
/// `cluster_state:ok`. `url` is `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`;
/// `nodes` holds each node's own `redis://` URL.
///
/// # Panics
///
/// When `redis-server` or `redis-cli` is missing (with a message saying how to install them),
/// or when the cluster does not form.
pub fn redis_cluster_own() -> TestRedis {
    let namespace = format!("test-{:016x}", fastrand::u64(..));
    let mut last = String::new();
    // A port taken between choosing and binding it: start again on others.
    for _ in 0..3 {
        match start_cluster() {
            Ok((url, nodes, servers)) => {
                return TestRedis {
                    url,
                    namespace,
                    owned: true,
                    nodes,
                    _servers: Some(Arc::new(servers)),
                };
            }
            Err(e) => last = e,
        }
    }
    panic!("could not start a test Redis Cluster: {last}")
}

/// The cluster's URL, its nodes' URLs and its processes.
fn start_cluster() -> Result<(String, Vec<String>, Servers), String> {
    let dir = std::env::temp_dir().join(format!("llmroute-cluster-{:016x}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // The guard owns the directory and the servers from here on: an early return stops them.
    let mut servers = Servers {
        children: Vec::new(),
        dir: Some(dir.clone()),
    };
    let (mut addrs, mut nodes) = (Vec::new(), Vec::new());
    for i in 0..CLUSTER_NODES {
        let (port, bus) = (free_port()?, free_port()?);
        let conf = dir.join(format!("nodes-{i}.conf"));
        let conf = conf.to_string_lossy();
        let bus = bus.to_string();
        let extra = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &conf,
            "--cluster-port",
            &bus,
        ];
        match spawn_on(port, &extra, &dir)? {
            Some((child, url)) => {
                servers.children.push(child);
                nodes.push(url);
            }
            None => panic!("{HOW_TO_INSTALL_CLUSTER}"),
        }
        addrs.push(format!("127.0.0.1:{port}"));
    }
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output();
    let out = match created {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{HOW_TO_INSTALL_CLUSTER}"),
        Err(e) => return Err(format!("redis-cli: {e}")),
    };
    if !out.status.success() {
        return Err(format!(
            "redis-cli --cluster create {}: {}{}",
            addrs.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for node in &nodes {
        wait_cluster_ok(node)?;
    }
    Ok((
        format!("redis+cluster://{}", addrs.join(",")),
        nodes,
        servers,
    ))
}
impl TestRedis {
    /// The index in `nodes` of the cluster node serving `namespace`'s keys (all of them: they
    /// share the hash tag `{namespace}`), from `CLUSTER KEYSLOT` and `CLUSTER NODES`.
    ///
    /// # Panics
    ///
    /// When the nodes do not answer or no node serves the slot.
    pub fn node_of(&self, namespace: &str) -> usize {
        let first = self.nodes.first().expect("a server this guard started");
        let key = format!("llmroute:{{{namespace}}}:v3");
        let slot: u16 = on_node(first, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key));
        let table: String = on_node(first, redis::cmd("CLUSTER").arg("NODES"));
        for line in table.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges...>
            let (Some(addr), Some(ranges)) = (fields.get(1), fields.get(8..)) else {
                continue;
            };
            let addr = addr.split('@').next().unwrap_or_default();
            let serves = ranges.iter().any(|r| {
                let (lo, hi) = r.split_once('-').unwrap_or((r, r));
                matches!((lo.parse::<u16>(), hi.parse::<u16>()),
                    (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
            });
            if serves {
                return self
                    .nodes
                    .iter()
                    .position(|n| n.contains(&format!("//{addr}/")))
                    .unwrap_or_else(|| panic!("{addr} is not a node of {}", self.url));
            }
        }
        panic!("no node serves slot {slot}: {table}")
    }

    /// `n` namespaces named after this guard's, whose keys live on `n` different nodes: each
    /// with its node.
    ///
    /// # Panics
    ///
    /// When 1000 candidates do not cover `n` nodes.
    pub fn namespaces_on_distinct_nodes(&self, n: usize) -> Vec<(String, usize)> {
        let mut chosen: Vec<(String, usize)> = Vec::new();
        for i in 0..1000 {
            let ns = format!("{}-{i}", self.namespace);
            let node = self.node_of(&ns);
            if chosen.iter().all(|(_, taken)| *taken != node) {
                chosen.push((ns, node));
                if chosen.len() == n {
                    return chosen;
                }
            }
        }
        panic!("1000 namespaces did not cover {n} nodes of {}", self.url);
    }
}

/// `cmd` sent to one server, answered as `T`.
///
/// # Panics
///
/// When the server does not answer or answers an error.
pub fn on_node<T: redis::FromRedisValue>(node: &str, cmd: &redis::Cmd) -> T {
    let client = redis::Client::open(node).unwrap_or_else(|e| panic!("{node}: {e}"));
    let mut conn = client
        .get_connection()
        .unwrap_or_else(|e| panic!("{node}: {e}"));
    cmd.query(&mut conn)
        .unwrap_or_else(|e| panic!("{node}: {cmd:?}: {e}"))
}

/// Polls `CLUSTER INFO` on `node` until it says `cluster_state:ok` (bounded: 10 s).
fn wait_cluster_ok(node: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = redis::Client::open(node).map_err(|e| format!("{node}: {e}"))?;
    let mut conn = client
        .get_connection()
        .map_err(|e| format!("{node}: {e}"))?;
    loop {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut conn)
            .map_err(|e| format!("{node}: CLUSTER INFO: {e}"))?;
        if info.lines().any(|l| l.trim() == "cluster_state:ok") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{node} not ready within 10 s: {info}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A whole OpenAI chat completion of 12 prompt and 3 completion tokens, as a mock upstream
/// answers it.
pub const OPENAI_OK: &str = r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;

/// Redis script calls (EVALSHA and EVAL) since `redis` started, from `INFO commandstats`.
pub async fn script_calls(redis: &TestRedis) -> u64 {
    let client = redis::Client::open(redis.url.as_str()).expect("the test Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the test Redis answers");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A bench's size, from environment variable `var` (else `default`), and the two-worker Tokio
/// runtime it runs on.
pub fn bench_setup(var: &str, default: usize) -> (usize, tokio::runtime::Runtime) {
    let n = std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    (n, runtime)
}
