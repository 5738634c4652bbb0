//! A PostgreSQL schema of a test's own on a real server.
//!
//! [`TestPostgres::new`] checks that the server answers (and fails the test, saying how to
//! provide one, when it does not: it never skips) and draws a schema name no other test uses.
//! Nothing is created: the code under test creates the schema. Dropping the guard drops the
//! schema and everything in it, so tests run side by side and leave nothing behind.

use std::future::Future;
use std::time::Duration;

use tokio_postgres::NoTls;

/// The server the tests use unless `PG_URL` names another.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The environment variable naming the PostgreSQL server of the tests.
pub const PG_URL_ENV: &str = "PG_URL";

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A PostgreSQL server to test against and a schema name of this test's own, dropped (with
/// `CASCADE`) when the guard drops.
#[derive(Debug)]
pub struct TestPostgres {
    url: String,
    schema: String,
}

impl TestPostgres {
    /// The server of `PG_URL` (else [`DEFAULT_PG_URL`]), checked, and a fresh schema name
    /// (`llmroute_t_` and 16 hex digits). Can be called inside a Tokio runtime or outside one.
    ///
    /// # Panics
    ///
    /// When the server does not answer, with a message saying how to provide one.
    pub fn new() -> TestPostgres {
        let url = std::env::var(PG_URL_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_PG_URL.to_owned());
        let schema = format!("llmroute_t_{:016x}", fastrand::u64(..));
        let check = url.clone();
        let answered = on_own_runtime(async move {
            let client = connect(&check).await?;
            client.simple_query("SELECT 1").await.map(drop)
        });
        if let Err(e) = answered {
            let e = with_causes(&e);
            panic!(
                "PostgreSQL at {} is unreachable: {e}. These tests need a PostgreSQL server \
                 (15 or later) they may create and drop schemas in: start one on \
                 127.0.0.1:5432 accepting user `postgres` into database `test`, or set {PG_URL_ENV} \
                 to another (e.g. {PG_URL_ENV}=postgres://postgres@127.0.0.1:5432/test)",
                router_core::config::redact_url(&url),
            );
        }
        TestPostgres { url, schema }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema of this test: unique, not created yet.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The server's `host:port` (the port 5432 when the URL names none), e.g. the target of a
    /// [`crate::Gate`].
    ///
    /// # Panics
    ///
    /// When the URL names no host.
    pub fn addr(&self) -> String {
        let (_, authority, _) = split_url(&self.url);
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        assert!(!host.is_empty(), "{} names no host", self.url);
        if (host.starts_with('[') && !host.contains("]:")) || !host.contains(':') {
            format!("{host}:5432")
        } else {
            host.to_owned()
        }
    }

    /// The URL with its host and port replaced by `addr` (user, password, database and options
    /// kept): the same server reached through, say, a [`crate::Gate`].
    pub fn url_via(&self, addr: std::net::SocketAddr) -> String {
        let (scheme, authority, rest) = split_url(&self.url);
        let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
        format!("{scheme}{}{addr}{rest}", user.unwrap_or_default())
    }

    /// A connection to the server, driven by a task on the current Tokio runtime.
    ///
    /// # Panics
    ///
    /// When the server does not answer, or outside a Tokio runtime.
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url).await.unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at {}: {}",
                router_core::config::redact_url(&self.url),
                with_causes(&e)
            )
        })
    }
}

impl Default for TestPostgres {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let url = self.url.clone();
        let drop_schema = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        let dropped = on_own_runtime(async move {
            let client = connect(&url).await?;
            // A connection of the code under test stuck in a transaction must not hang the test.
            client.batch_execute("SET lock_timeout = '10s'").await?;
            client.batch_execute(&drop_schema).await
        });
        if let Err(e) = dropped {
            eprintln!(
                "could not drop the test schema {}: {}",
                self.schema,
                with_causes(&e)
            );
        }
    }
}

/// `e` and its causes, `: `-separated (the client's own message alone says little, e.g.
/// `error connecting to server`).
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// A connection to `url` whose connection task runs on the current runtime.
async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config: tokio_postgres::Config = url.parse()?;
    config.connect_timeout(CONNECT_TIMEOUT);
    config.application_name("llmroute-tests");
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Runs `work` to its end on a current-thread runtime of its own, on a thread of its own: works
/// inside a Tokio runtime (even a current-thread one, which it blocks meanwhile) and outside.
fn on_own_runtime<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a Tokio runtime for the PostgreSQL test helper")
            .block_on(work)
    })
    .join()
    .expect("the PostgreSQL test helper's thread ends without panicking")
}

/// `postgres://`, the authority (`user:password@host:port`) and what follows it.
fn split_url(url: &str) -> (&str, &str, &str) {
    let start = url.find("://").map_or(0, |i| i + 3);
    let (scheme, after) = url.split_at(start);
    let end = after.find(['/', '?']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    (scheme, authority, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(url: &str) -> TestPostgres {
        TestPostgres {
            url: url.to_owned(),
            // Never dropped (that would reach for the server): forgotten.
            schema: "never_created".to_owned(),
        }
    }

    #[test]
    fn the_address_and_a_url_through_another_address() {
        let pg = guard("postgres://u:p@db.example:6543/test?sslmode=disable");
        assert_eq!(pg.addr(), "db.example:6543");
        let via = pg.url_via("127.0.0.1:4000".parse().expect("an address"));
        assert_eq!(via, "postgres://u:p@127.0.0.1:4000/test?sslmode=disable");
        std::mem::forget(pg);
        let pg = guard("postgresql://localhost/test");
        assert_eq!(pg.addr(), "localhost:5432");
        std::mem::forget(pg);
    }
}
