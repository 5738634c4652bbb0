//! The `state` URL: checking it, parsing it (one server or a Redis Cluster), and showing it
//! without its password.
//!
//! A cluster is written `redis+cluster://[user:password@]host:port,host:port,...` (or
//! `rediss+cluster://` for TLS): the nodes to discover the cluster from, the credentials once (on
//! the first node; they apply to every node). A path or query after the last node (`/0`,
//! `?protocol=resp3`) applies to every node. In the file, `state` may also be a YAML list of the
//! nodes ([`StateValue::Nodes`]), which becomes that URL.

use std::fmt;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// `state: memory`: the ledger lives in this process only (nothing shared, nothing on disk).
pub const IN_MEMORY: &str = "memory";

/// `state` as written in the file: one URL, or a list of a Redis Cluster's nodes.
pub(crate) enum StateValue {
    /// `state: redis://...` (or `redis+cluster://a,b,c`).
    Url(String),
    /// `state: [redis://10.0.0.1:6379, 10.0.0.2:6379]`: a cluster's nodes.
    Nodes(Vec<String>),
}

/// Shows the value redacted: it may hold a password.
impl fmt::Debug for StateValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateValue::Url(url) => f.debug_tuple("Url").field(&redact_url(url)).finish(),
            StateValue::Nodes(nodes) => f
                .debug_tuple("Nodes")
                .field(&nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl<'de> Deserialize<'de> for StateValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StateVisitor;
        impl<'de> Visitor<'de> for StateVisitor {
            type Value = StateValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Redis URL, or a list of a Redis Cluster's nodes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StateValue, E> {
                Ok(StateValue::Url(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StateValue, A::Error> {
                let mut nodes = Vec::new();
                while let Some(node) = seq.next_element::<String>()? {
                    nodes.push(node);
                }
                Ok(StateValue::Nodes(nodes))
            }
        }
        deserializer.deserialize_any(StateVisitor)
    }
}

/// The `redis+cluster://` URL of a cluster given as a list of nodes, each `host:port` or
/// `redis://[user:password@]host:port` (`rediss://` for TLS, the same for every node). The error
/// names the entry (`state[1]` is the second) and never shows a password.
pub(crate) fn nodes_to_url(nodes: &[String]) -> Result<String, String> {
    const WRITE: &str = "list each node as host:port or redis://[user:password@]host:port \
        (rediss:// for TLS), e.g. [redis://10.0.0.1:6379, redis://10.0.0.2:6379]";
    if nodes.is_empty() {
        return Err(format!("is an empty list; {WRITE}, or write one Redis URL"));
    }
    let mut scheme: Option<&str> = None;
    let mut parts = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let bad = |why: &str| format!("state[{i}] `{}` {why}; {WRITE}", redact_url(node));
        let (this, rest) = match node.find("://") {
            Some(at) => (&node[..at + 3], &node[at + 3..]),
            None => ("redis://", node.as_str()),
        };
        if !["redis://", "rediss://"]
            .iter()
            .any(|s| this.eq_ignore_ascii_case(s))
        {
            return Err(bad("is not a node of a Redis Cluster"));
        }
        match scheme {
            Some(first) if !first.eq_ignore_ascii_case(this) => {
                return Err(bad("mixes TLS and plain nodes"));
            }
            _ => scheme = Some(this),
        }
        // A path or query after the host: a database (a cluster has only 0) or options.
        let host_from = rest.rfind('@').map_or(0, |at| at + 1);
        let (authority, tail) = match rest[host_from..].find(['/', '?', '#']) {
            Some(end) => rest.split_at(host_from + end),
            None => (rest, ""),
        };
        if !matches!(tail, "" | "/" | "/0") {
            return Err(bad("has a database or options after the host"));
        }
        if rest[..host_from].contains(',') {
            return Err(bad(
                "has a `,` in its user or password: percent-encode it as %2C",
            ));
        }
        if authority.contains(',') || authority.trim().is_empty() {
            return Err(bad("is not one host:port"));
        }
        parts.push(authority);
    }
    let scheme = scheme.unwrap_or("redis://");
    let cluster = if scheme.eq_ignore_ascii_case("rediss://") {
        "rediss+cluster://"
    } else {
        "redis+cluster://"
    };
    Ok(format!("{cluster}{}", parts.join(",")))
}

/// The cluster schemes and the node scheme each stands for.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// A parsed `state`.
pub(crate) enum RedisTarget {
    /// One server (or a proxy in front of several).
    Single,
    /// The seed nodes of a Redis Cluster, each carrying the cluster's credentials (if any).
    Cluster(Vec<ConnectionInfo>),
}

/// `url` with any password replaced by `***`, fit for messages and output.
///
/// `redis://user:secret@host:6379/0` becomes `redis://user:***@host:6379/0`, and
/// `redis://:secret@host` becomes `redis://:***@host`; a `pass=` / `password=` query value
/// becomes `***` too. Text that is not a URL but contains `@` keeps only what follows the last
/// `@`; one holding `key=value` settings (`host:6379,password=…`, libpq's `password=…`) is not
/// shown at all. When in doubt this hides too much rather than too little.
///
/// A cluster URL shows its nodes; the one with credentials shows `***` in their place, and when
/// a password could itself hold a `,` or `@`, nothing before the last `@` is shown.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    if scheme.is_empty() && rest.contains('=') {
        return NOT_SHOWN.to_owned();
    }
    if cluster_scheme(scheme).is_some() {
        let (nodes, suffix) = split_nodes(rest);
        let shown = redact_nodes(&nodes).join(",");
        return format!("{scheme}{}", redact_query(&format!("{shown}{suffix}")));
    }
    let rest = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let host = &rest[at + 1..];
            match userinfo.find(':') {
                Some(colon) if !scheme.is_empty() => format!("{}:***@{host}", &userinfo[..colon]),
                _ if scheme.is_empty() => format!("***@{host}"),
                _ => format!("{userinfo}@{host}"),
            }
        }
        None => rest.to_owned(),
    };
    format!("{scheme}{}", redact_query(&rest))
}

/// What [`redact_url`] shows of settings that are not a URL.
const NOT_SHOWN: &str = "(settings that are not a URL, not shown)";

/// The node scheme (`redis://` or `rediss://`) of a cluster scheme, `None` for any other.
fn cluster_scheme(scheme: &str) -> Option<&'static str> {
    CLUSTER_SCHEMES
        .iter()
        .find(|(cluster, _)| scheme.eq_ignore_ascii_case(cluster))
        .map(|&(_, node)| node)
}

/// A cluster URL after its scheme, split into its comma-separated nodes and the path and query
/// after the last node. The suffix starts at the first `/`, `?` or `#` after the last `@`, so a
/// password holding one of them stays in its node.
fn split_nodes(rest: &str) -> (Vec<&str>, &str) {
    let from = rest.rfind('@').map_or(0, |at| at + 1);
    let end = rest[from..]
        .find(['/', '?', '#'])
        .map_or(rest.len(), |i| from + i);
    (rest[..end].split(',').collect(), &rest[end..])
}

/// Each node of a cluster URL as it may be shown.
///
/// Nothing before the last `@` of the whole list is shown, since a password written without
/// percent-encoding may itself hold `,` or `@` and so look like several nodes: the nodes before
/// the last one with credentials become `***`, and that one shows `***@host:port`. The one
/// layout with nothing to guess, credentials once on the first node
/// (`user:secret@h1:1,h2:2`), keeps its user name: `user:***@h1:1,h2:2`.
fn redact_nodes<'a>(nodes: &[&'a str]) -> Vec<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    let last_with_at = nodes.iter().rposition(|n| n.contains('@'));
    nodes
        .iter()
        .enumerate()
        .map(|(i, &node)| match last_with_at {
            Some(k) if i < k => Cow::Borrowed("***"),
            Some(k) if i == k => {
                let at = node.rfind('@').unwrap_or(0);
                let (userinfo, host) = (&node[..at], &node[at + 1..]);
                let plain = k == 0 && !userinfo.contains('@');
                match userinfo.find(':') {
                    Some(colon) if plain => {
                        Cow::Owned(format!("{}:***@{host}", &userinfo[..colon]))
                    }
                    _ => Cow::Owned(format!("***@{host}")),
                }
            }
            _ => Cow::Borrowed(node),
        })
        .collect()
}

/// Replace the values of `pass=` and `password=` query parameters (redis+unix URLs) by `***`.
fn redact_query(text: &str) -> String {
    let Some(q) = text.find('?') else {
        return text.to_owned();
    };
    let params: Vec<String> = text[q + 1..]
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _))
                if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
            {
                format!("{key}=***")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("{}?{}", &text[..q], params.join("&"))
}

/// Check that `url` is a Redis URL the client accepts. The error text is safe to show: it never
/// contains the URL's password.
pub(crate) fn check_redis_url(url: &str) -> Result<(), String> {
    parse_redis_url(url).map(drop)
}

/// Parse `url`: one server, or a cluster. The error text is safe to show: it never contains a
/// password, names the node at fault, and says what to write.
pub(crate) fn parse_redis_url(url: &str) -> Result<RedisTarget, String> {
    if url.trim().is_empty() {
        return Err("is empty; write a Redis URL such as redis://127.0.0.1:6379/0".to_owned());
    }
    let shown = redact_url(url);
    if let Some(i) = url.find("://")
        && let Some(node_scheme) = cluster_scheme(&url[..i + 3])
    {
        return parse_cluster(url, &url[i + 3..], node_scheme, &shown).map(RedisTarget::Cluster);
    }
    let Err(err) = url.into_connection_info() else {
        return Ok(RedisTarget::Single);
    };
    // redis-rs does not echo the URL today; scrub anyway, in case a later version does.
    let reason = scrub(&err.to_string(), url, &shown);
    let hint = if url.contains(',') {
        "; for a Redis Cluster write redis+cluster://host:port,host:port"
    } else {
        ""
    };
    Err(format!(
        "`{shown}` is not a usable Redis URL ({reason}); write it as \
         redis://[user:password@]host:port/db, rediss://... for TLS, or redis+unix:///path{hint}"
    ))
}

/// The nodes of a cluster URL (`rest` is what follows the scheme), the credentials given once
/// copied onto every node.
fn parse_cluster(
    url: &str,
    rest: &str,
    node_scheme: &str,
    shown: &str,
) -> Result<Vec<ConnectionInfo>, String> {
    const WRITE: &str = "write a Redis Cluster as redis+cluster://[user:password@]host:port,\
        host:port,... (rediss+cluster:// for TLS), the user and password once, on the first node";
    let (nodes, suffix) = split_nodes(rest);
    let names = redact_nodes(&nodes);
    let mut infos = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let name = format!("node {} (`{}`)", i + 1, names[i]);
        if node.trim().is_empty() {
            return Err(format!("`{shown}`: node {} is empty; {WRITE}", i + 1));
        }
        let node_url = format!("{node_scheme}{node}{suffix}");
        let info = node_url.as_str().into_connection_info().map_err(|err| {
            let reason = scrub(&scrub(&err.to_string(), &node_url, &names[i]), url, shown);
            format!("`{shown}`: {name} is not a usable Redis address ({reason}); {WRITE}")
        })?;
        if info.redis_settings().db() != 0 {
            return Err(format!(
                "`{shown}`: a Redis Cluster has only database 0, not {}; remove the `/{}` \
                 after the last node",
                info.redis_settings().db(),
                info.redis_settings().db()
            ));
        }
        if matches!(info.addr(), ConnectionAddr::Unix(_)) {
            return Err(format!("`{shown}`: {name} is a socket path; {WRITE}"));
        }
        infos.push(info);
    }
    // The credentials: given once, or the same wherever repeated.
    let with_credentials = |info: &ConnectionInfo| {
        let r = info.redis_settings();
        (r.username().is_some() || r.password().is_some()).then(|| {
            (
                r.username().map(str::to_owned),
                r.password().map(str::to_owned),
            )
        })
    };
    let mut credentials: Option<(usize, Credentials)> = None;
    for (i, info) in infos.iter().enumerate() {
        let Some(these) = with_credentials(info) else {
            continue;
        };
        match &credentials {
            None => credentials = Some((i, these)),
            Some((first, given)) if *given != these => {
                return Err(format!(
                    "`{shown}`: node {} gives another user or password than node {}; a cluster \
                     has one: {WRITE}",
                    i + 1,
                    first + 1
                ));
            }
            Some(_) => {}
        }
    }
    if let Some((_, (user, password))) = credentials {
        infos = infos
            .into_iter()
            .map(|info| {
                let mut r = info.redis_settings().clone();
                if let Some(user) = &user {
                    r = r.set_username(user);
                }
                if let Some(password) = &password {
                    r = r.set_password(password);
                }
                info.set_redis_settings(r)
            })
            .collect();
    }
    Ok(infos)
}

/// A node's user name and password.
type Credentials = (Option<String>, Option<String>);

/// `text` with every occurrence of the raw `url` replaced by its redacted form.
fn scrub(text: &str, url: &str, shown: &str) -> String {
    if url.is_empty() {
        text.to_owned()
    } else {
        text.replace(url, shown)
    }
}
#[cfg(test)]
mod tests {
    use super::{RedisTarget, nodes_to_url, parse_redis_url, redact_url};

    #[test]
    fn redacts_passwords_and_keeps_the_rest() {
        let cases = [
            ("redis://u:pw@h:6379/0", "redis://u:***@h:6379/0"),
            ("redis://:pw@h", "redis://:***@h"),
            ("redis://u@h", "redis://u@h"),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("rediss://u:p@ss@h/0", "rediss://u:***@h/0"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=pw",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            ("garbage:pw@h", "***@h"),
            ("", ""),
            // Settings, not URLs: StackExchange.Redis's and libpq's.
            ("redis-host:6379,password=s3cret", super::NOT_SHOWN),
            ("host=db user=app password=s3cret", super::NOT_SHOWN),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "redact_url({url:?})");
        }
    }

    #[test]
    fn redacts_every_node_of_a_cluster() {
        let cases = [
            (
                "redis+cluster://h1:7000,h2:7001",
                "redis+cluster://h1:7000,h2:7001",
            ),
            (
                "redis+cluster://u:pw@h1:7000,h2:7001/0",
                "redis+cluster://u:***@h1:7000,h2:7001/0",
            ),
            ("rediss+cluster://:pw@h1:1", "rediss+cluster://:***@h1:1"),
            // A password planted in the second node: nothing before its `@` is shown.
            (
                "redis+cluster://h1:7000,:s3cret@h2:7001,h3:7002",
                "redis+cluster://***,***@h2:7001,h3:7002",
            ),
            (
                "redis+cluster://u:pw@h1:1,u:pw@h2:2,h3:3",
                "redis+cluster://***,***@h2:2,h3:3",
            ),
            // A raw `,` or `@` in a password could pass for a node separator.
            (
                "redis+cluster://u:p,w@h1:1,h2:2",
                "redis+cluster://***,***@h1:1,h2:2",
            ),
            (
                "redis+cluster://u:p@w@h1:1,h2:2",
                "redis+cluster://***@h1:1,h2:2",
            ),
            (
                "redis+cluster://h1:1,h2:2?password=pw&protocol=resp3",
                "redis+cluster://h1:1,h2:2?password=***&protocol=resp3",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "redact_url({url:?})");
        }
    }

    fn error(url: &str) -> String {
        match parse_redis_url(url) {
            Ok(_) => panic!("{url:?} was accepted"),
            Err(e) => e,
        }
    }

    fn nodes(url: &str) -> Vec<redis::ConnectionInfo> {
        match parse_redis_url(url) {
            Ok(RedisTarget::Cluster(nodes)) => nodes,
            Ok(RedisTarget::Single) => panic!("{url:?} read as one server"),
            Err(e) => panic!("{url:?} refused: {e}"),
        }
    }

    #[test]
    fn reads_a_cluster_and_gives_its_credentials_to_every_node() {
        let n = nodes("redis+cluster://127.0.0.1:7000,127.0.0.1:7001,localhost");
        let addrs: Vec<String> = n.iter().map(|i| i.addr().to_string()).collect();
        assert_eq!(
            addrs,
            ["127.0.0.1:7000", "127.0.0.1:7001", "localhost:6379"],
            "node addresses"
        );
        assert!(n.iter().all(|i| i.redis_settings().password().is_none()));

        let n = nodes("redis+cluster://app:pw@h1:7000,h2:7001,app:pw@h3:7002/0");
        for info in &n {
            let r = info.redis_settings();
            assert_eq!((r.username(), r.password()), (Some("app"), Some("pw")));
        }
        // Given on a later node only, they still apply to all (redis-rs alone would drop them).
        let n = nodes("redis+cluster://h1:7000,:pw@h2:7001");
        assert_eq!(n[0].redis_settings().password(), Some("pw"));

        assert!(matches!(
            parse_redis_url("redis://127.0.0.1:6379/0"),
            Ok(RedisTarget::Single)
        ));
        assert!(matches!(
            parse_redis_url("rediss+cluster://h1:7000,h2:7001"),
            Ok(RedisTarget::Cluster(n)) if n.len() == 2
        ));
    }

    #[test]
    fn cluster_errors_name_the_node_and_say_what_to_write() {
        let e = error("redis+cluster://h1:7000,h2:notaport");
        assert!(e.contains("node 2 (`h2:notaport`)"), "{e}");
        assert!(
            e.contains("redis+cluster://[user:password@]host:port,"),
            "{e}"
        );

        let e = error("redis+cluster://h1:7000,,h3:7002");
        assert!(e.contains("node 2 is empty"), "{e}");
        let e = error("redis+cluster://");
        assert!(e.contains("node 1 is empty"), "{e}");

        let e = error("redis+cluster://h1:7000,h2:7001/3");
        assert!(e.contains("only database 0") && e.contains("`/3`"), "{e}");

        let e = error("redis+cluster://:one@h1:7000,:two@h2:7001");
        assert!(
            e.contains("node 2 gives another user or password than node 1"),
            "{e}"
        );

        // A comma in a one-server URL: say how to write a cluster.
        let e = error("redis://h1:7000,h2:7001");
        assert!(e.contains("redis+cluster://host:port,host:port"), "{e}");
    }

    #[test]
    fn no_password_reaches_a_message() {
        let urls = [
            "redis+cluster://h1:7000,:s3cret@h2:notaport",
            "redis+cluster://h1:7000,u:s3cret@h2:7001/4",
            "redis+cluster://:s3cret@h1:7000,:0th3r@h2:7001",
            "redis+cluster://u:s3cret@h1:x,h2:7001",
            "redis+cluster://u:s3,cret@h1:7000,h2:x",
            "redis+cluster://h1:1,u:s3@cret@h2:x",
            "rediss+cluster://u:s3cret@h1:1,,h2:2",
            "redis://u:s3cret@h1:7000,h2:7001",
            "redis-host:6379,password=s3cret",
        ];
        for url in urls {
            let e = error(url);
            for secret in ["s3cret", "s3", "cret", "0th3r"] {
                assert!(!e.contains(secret), "{url:?} leaks {secret:?}: {e}");
                assert!(
                    !redact_url(url).contains(secret),
                    "{url:?} leaks {secret:?}"
                );
            }
        }
    }

    #[test]
    fn a_list_of_nodes_becomes_a_cluster_url() {
        let list = |nodes: &[&str]| nodes.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let ok = [
            (
                list(&["redis://10.0.0.1:6379", "10.0.0.2:6379"]),
                "redis+cluster://10.0.0.1:6379,10.0.0.2:6379",
            ),
            (
                list(&["rediss://:pw@a:1/0", "rediss://b:2"]),
                "rediss+cluster://:pw@a:1,b:2",
            ),
        ];
        for (nodes, want) in ok {
            assert_eq!(nodes_to_url(&nodes).as_deref(), Ok(want));
            assert!(check(want), "{want}");
        }
        let bad = [
            (list(&[]), "is an empty list"),
            (list(&["redis://a:1", "rediss://b:2"]), "state[1]"),
            (
                list(&["redis://a:1", "redis://:s3cret@b:2/3"]),
                "state[1] `redis://:***@b:2/3`",
            ),
            (list(&["redis+unix:///tmp/r.sock"]), "state[0]"),
            (
                list(&["a:1,b:2"]),
                "state[0] `a:1,b:2` is not one host:port",
            ),
            (
                list(&["h1:6379,password=s3cret"]),
                "state[0] `(settings that are not a URL, not shown)`",
            ),
        ];
        for (nodes, want) in bad {
            let e = nodes_to_url(&nodes).expect_err("refused");
            assert!(e.contains(want), "{nodes:?}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    fn check(url: &str) -> bool {
        parse_redis_url(url).is_ok()
    }
}
