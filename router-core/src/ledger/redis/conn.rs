//! The connection under the Redis store: one server through a [`ConnectionManager`], or a Redis
//! Cluster through redis-rs's cluster client. Either runs a prepared script call.
//!
//! On a cluster every script runs unchanged: all keys of one namespace share the hash tag
//! `{namespace}`, so one call's keys are on one slot and the cluster client sends the EVALSHA to
//! the shard owning its first key (following MOVED and ASK when slots move). A call with no keys
//! at all (a snapshot of zero deployments, as the gateway's readiness check sends) would go to a
//! random node; it is sent to the namespace's shard instead, so that the check asks the shard
//! the namespace depends on. On NOSCRIPT, redis-rs loads the script with SCRIPT LOAD, which the
//! cluster client sends to every node, and calls again.

use std::time::Duration;

use futures_util::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Arg, Cmd, ConnectionInfo, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisFuture,
    RedisResult, ScriptInvocation, Value,
};

use super::RedisStoreOptions;
use crate::config::{RedisTarget, parse_redis_url};

/// A connection to one Redis server or to a Redis Cluster. Cloning is cheap and shares it.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server (or a proxy in front of several).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(NamespaceRouted),
}

impl Conn {
    /// Connects to `url` (a server or a cluster, see `crate::config::state`), within the
    /// timeouts of `options`; every command is bounded by `options.response_timeout`.
    pub(crate) async fn open(url: &str, options: &RedisStoreOptions) -> RedisResult<Self> {
        match parse_redis_url(url) {
            Ok(RedisTarget::Single) => open_single(url, options).await.map(Conn::Single),
            Ok(RedisTarget::Cluster(nodes)) => {
                let conn = open_cluster(nodes, options).await?;
                // The slot of every key of the namespace (see `RedisStore::connect`).
                let key = format!("llmroute:{{{}}}", options.namespace);
                let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
                Ok(Conn::Cluster(NamespaceRouted { conn, route }))
            }
            // The message is safe to show: it never holds a password.
            Err(why) => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "unusable state URL",
                why,
            ))),
        }
    }

    /// Runs a prepared script call (EVALSHA; on NOSCRIPT, SCRIPT LOAD and EVALSHA again).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        match self {
            Conn::Single(conn) => inv.invoke_async(&mut conn.clone()).await,
            Conn::Cluster(conn) => inv.invoke_async(&mut conn.clone()).await,
        }
    }

    /// Loads `script` (SCRIPT LOAD; on a cluster, into every node).
    pub(crate) async fn load(&self, script: &redis::Script) -> RedisResult<String> {
        match self {
            Conn::Single(conn) => script.load_async(&mut conn.clone()).await,
            Conn::Cluster(conn) => script.load_async(&mut conn.clone()).await,
        }
    }
}

/// How long the connection manager waits before its one retry of a failed connect, at least.
const RETRY_DELAY: Duration = Duration::from_millis(5);

/// One server, connected now; the manager reconnects by itself after a drop.
async fn open_single(url: &str, options: &RedisStoreOptions) -> RedisResult<ConnectionManager> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(options.response_timeout))
        .set_connection_timeout(Some(options.connect_timeout))
        // One retry, soon: a refused connection is then reported as such (`Connection refused`)
        // well within `ledger.timeout_ms`, rather than as a call that got no answer.
        .set_number_of_retries(1)
        .set_min_delay(RETRY_DELAY);
    if options.lazy {
        ConnectionManager::new_lazy_with_config(client, config)
    } else {
        ConnectionManager::new_with_config(client, config).await
    }
}

/// A cluster, discovered now from `nodes` (which carry its credentials); reconnects to nodes and
/// refreshes the slot map by itself. `connect_timeout` bounds each node's connection and the
/// whole discovery; `response_timeout` bounds each command, redirections and retries included.
async fn open_cluster(
    nodes: Vec<ConnectionInfo>,
    options: &RedisStoreOptions,
) -> RedisResult<ClusterConnection> {
    let client = ClusterClientBuilder::new(nodes)
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.response_timeout)
        .overall_response_timeout(Some(options.response_timeout))
        .build()?;
    match tokio::time::timeout(options.connect_timeout, client.get_async_connection()).await {
        Ok(connected) => connected,
        Err(_elapsed) => Err(RedisError::from((
            ErrorKind::Io,
            "no cluster node answered within the connect timeout",
            format!("{} ms", options.connect_timeout.as_millis()),
        ))),
    }
}

/// A cluster connection that sends script calls without keys to the namespace's shard.
#[derive(Clone)]
pub(crate) struct NamespaceRouted {
    conn: ClusterConnection,
    /// The primary of the slot of the namespace's hash tag.
    route: Route,
}

impl ConnectionLike for NamespaceRouted {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if is_keyless_script(cmd) {
            let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(self.route));
            self.conn.route_command(cmd.clone(), to).boxed()
        } else {
            self.conn.req_packed_command(cmd)
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// `EVALSHA sha 0 ...` or `EVAL script 0 ...`: a script call the cluster client would send to a
/// random node.
fn is_keyless_script(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter();
    let is_script = matches!(args.next(), Some(Arg::Simple(name))
        if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL"));
    is_script && matches!(args.nth(1), Some(Arg::Simple(b"0")))
}

#[cfg(test)]
mod tests {
    use super::is_keyless_script;
    use crate::config::{RedisTarget, parse_redis_url};

    /// The enabled features carry TLS to every node of a cluster (`rediss+cluster://`).
    #[test]
    fn a_tls_cluster_client_builds() {
        let Ok(RedisTarget::Cluster(nodes)) =
            parse_redis_url("rediss+cluster://app:pw@10.0.0.1:6379,10.0.0.2:6379")
        else {
            panic!("a TLS cluster URL");
        };
        assert!(
            nodes
                .iter()
                .all(|n| matches!(n.addr(), redis::ConnectionAddr::TcpTls { .. }))
        );
        let built = redis::cluster::ClusterClientBuilder::new(nodes).build();
        assert!(built.is_ok(), "{:?}", built.err());
    }

    #[test]
    fn keyless_script_calls_are_recognised() {
        let script = redis::Script::new("return 1");
        let keyless = redis::cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(0)
            .arg("x")
            .clone();
        assert!(is_keyless_script(&keyless));
        let keyed = redis::cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg("k")
            .clone();
        assert!(!is_keyless_script(&keyed));
        assert!(is_keyless_script(redis::cmd("eval").arg("return 1").arg(0)));
        assert!(!is_keyless_script(redis::cmd("GET").arg("0").arg("0")));
    }
}
