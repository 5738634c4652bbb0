//! The PostgreSQL sink: one schema (created when missing), one connection made at the first use
//! and made again after any failure, a batch written as one `INSERT ... SELECT FROM UNNEST` of
//! column arrays, so a batch of any size is one prepared statement and one round trip.
//!
//! `sslmode=require` in the URL connects over TLS (rustls), the server's certificate checked
//! against the Mozilla roots (`webpki-roots`) and its name; `disable` and `prefer` (the default)
//! connect without TLS.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use router_core::config::redact_url;
use tokio::sync::Mutex;
use tokio_postgres::config::SslMode;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::sqlite::int;
use super::{COLUMNS, MIGRATIONS, MIGRATIONS_TABLE, UsageError, failed_text};
use crate::query::{Cells, Dialect, Param, Query, Row};
use crate::record::Record;

/// A key of `pg_advisory_xact_lock` held while migrating, so instances starting together apply
/// each migration once.
const MIGRATION_LOCK: i64 = 0x6c6c_6d72_7573_6167; // "llmrusag"

/// Records in a PostgreSQL schema.
pub struct PostgresSink {
    config: tokio_postgres::Config,
    url: String,
    schema: String,
    timeout: Duration,
    /// The TLS connector, for `sslmode=require`.
    tls: Option<MakeRustlsConnect>,
    conn: Mutex<Option<Conn>>,
}

struct Conn {
    client: Client,
    insert: Statement,
}

/// Shows the URL without its password.
impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSink")
            .field("url", &self.url)
            .field("schema", &self.schema)
            .field("timeout", &self.timeout)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

impl PostgresSink {
    /// A sink on `url` in `schema`: the URL is checked now, the server is reached at the first
    /// write or query, each bounded by `timeout`.
    pub fn new(url: &str, schema: &str, timeout: Duration) -> Result<Self, UsageError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| UsageError::Sink {
            sink: redact_url(url),
            message: format!(
                "not a PostgreSQL URL ({e}); write postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            ),
        })?;
        config.connect_timeout(timeout);
        config.application_name("llmroute");
        let tls = match config.get_ssl_mode() {
            SslMode::Require => Some(tls().map_err(|e| UsageError::Sink {
                sink: redact_url(url),
                message: format!("cannot set up TLS: {e}"),
            })?),
            _ => None,
        };
        Ok(Self {
            config,
            url: redact_url(url),
            schema: schema.to_owned(),
            timeout,
            tls,
            conn: Mutex::new(None),
        })
    }

    /// The URL without its password, and the schema.
    pub fn describe(&self) -> String {
        format!("{} (schema {})", self.url, self.schema)
    }

    fn table(&self, name: &str) -> String {
        format!("{}.{name}", self.quoted())
    }

    /// The schema as a quoted identifier: any `"` in it doubled, so that a name given in code
    /// (the configuration allows none) is only ever a name.
    fn quoted(&self) -> String {
        format!("\"{}\"", self.schema.replace('"', "\"\""))
    }

    fn error(&self, message: impl std::fmt::Display) -> UsageError {
        UsageError::Sink {
            sink: self.describe(),
            message: message.to_string(),
        }
    }

    /// `work` within the timeout, its error named. `work` takes the connection out of its slot
    /// and puts it back only once it succeeded: after any failure or a timeout the slot is
    /// empty and the next call connects anew.
    async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, UsageError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(pg_message(&e))),
            Err(_) => Err(self.error(format!(
                "no answer within {} ms (usage.timeout_ms)",
                self.timeout.as_millis()
            ))),
        }
    }

    /// The connection in `slot`, taken out, or a new one.
    async fn take(&self, slot: &mut Option<Conn>) -> Result<Conn, tokio_postgres::Error> {
        match slot.take() {
            Some(conn) => Ok(conn),
            None => self.connect().await,
        }
    }

    async fn connect(&self) -> Result<Conn, tokio_postgres::Error> {
        let mut client = match &self.tls {
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                drive(connection);
                client
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await?;
                drive(connection);
                client
            }
        };
        self.migrate(&mut client).await?;
        let arrays = [
            "text", "int8", "text", "text", "text", "text", "text", "text", "text", "int8", "int8",
            "int8", "int8", "int8", "int8", "int8", "int4", "text", "int8", "text", "text", "text",
            "bool", "int8",
        ];
        let unnest: Vec<String> = arrays
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{t}[]", i + 1))
            .collect();
        let sql = format!(
            "INSERT INTO {} ({COLUMNS}) SELECT * FROM UNNEST({}) ON CONFLICT (id) DO NOTHING",
            self.table("usage_records"),
            unnest.join(", ")
        );
        let insert = client.prepare(&sql).await?;
        Ok(Conn { client, insert })
    }

    /// Creates the schema and applies the migrations not applied yet, under an advisory lock.
    async fn migrate(&self, client: &mut Client) -> Result<(), tokio_postgres::Error> {
        let prefix = format!("{}.", self.quoted());
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", self.quoted()))
            .await?;
        tx.batch_execute(&MIGRATIONS_TABLE.replace("{p}", &prefix))
            .await?;
        let applied = format!("SELECT version FROM {prefix}usage_migrations WHERE version = $1");
        for (version, sql) in MIGRATIONS {
            if tx.query_opt(&applied, &[version]).await?.is_none() {
                tx.batch_execute(&sql.replace("{p}", &prefix)).await?;
                let mark = format!(
                    "INSERT INTO {prefix}usage_migrations (version, applied_ms) VALUES ($1, $2)"
                );
                tx.execute(&mark, &[version, &crate::now_ms()]).await?;
            }
        }
        tx.commit().await
    }

    /// Writes `records` as one statement.
    pub async fn write(&self, records: &[Record]) -> Result<(), UsageError> {
        if records.is_empty() {
            return Ok(());
        }
        let text = |f: fn(&Record) -> &String| {
            records
                .iter()
                .map(|r| pg_text(f(r)))
                .collect::<Vec<Cow<'_, str>>>()
        };
        let opt = |f: fn(&Record) -> &Option<String>| {
            records
                .iter()
                .map(|r| f(r).as_deref().map(pg_text))
                .collect::<Vec<Option<Cow<'_, str>>>>()
        };
        let num = |f: fn(&Record) -> u64| records.iter().map(|r| int(f(r))).collect::<Vec<i64>>();
        let id = text(|r| &r.id);
        let at = num(|r| r.at_ms);
        let request = text(|r| &r.request_id);
        let tenant = opt(|r| &r.tenant);
        let key = opt(|r| &r.key_id);
        let asked = text(|r| &r.model_asked);
        let route = opt(|r| &r.route);
        let provider = opt(|r| &r.provider);
        let model = opt(|r| &r.model);
        let prompt = num(|r| r.prompt_tokens);
        let cached = num(|r| r.cached_tokens);
        let completion = num(|r| r.completion_tokens);
        let reasoning = num(|r| r.reasoning_tokens);
        let cost = num(|r| r.cost_micros);
        let latency = num(|r| r.latency_ms);
        let first: Vec<Option<i64>> = records.iter().map(|r| r.first_token_ms.map(int)).collect();
        let attempts: Vec<i32> = records
            .iter()
            .map(|r| i32::try_from(r.attempts).unwrap_or(i32::MAX))
            .collect();
        let failed: Vec<String> = records
            .iter()
            .map(|r| pg_text(&failed_text(r)).into_owned())
            .collect();
        let waited = num(|r| r.waited_ms);
        let outcome: Vec<&str> = records.iter().map(|r| r.outcome.as_str()).collect();
        let failure = opt(|r| &r.failure);
        let priority = text(|r| &r.priority);
        let stream: Vec<bool> = records.iter().map(|r| r.stream).collect();
        let queued: Vec<Option<i64>> = records.iter().map(|r| r.queue_position.map(int)).collect();
        let params: [&(dyn ToSql + Sync); 24] = [
            &id,
            &at,
            &request,
            &tenant,
            &key,
            &asked,
            &route,
            &provider,
            &model,
            &prompt,
            &cached,
            &completion,
            &reasoning,
            &cost,
            &latency,
            &first,
            &attempts,
            &failed,
            &waited,
            &outcome,
            &failure,
            &priority,
            &stream,
            &queued,
        ];
        let mut slot = self.conn.lock().await;
        self.bounded(async {
            let conn = self.take(&mut slot).await?;
            conn.client.execute(&conn.insert, &params).await?;
            *slot = Some(conn);
            Ok(())
        })
        .await
    }

    /// The rows of `query`.
    pub async fn query(&self, query: &Query) -> Result<Vec<Row>, UsageError> {
        let (sql, params) = query.sql(&self.table("usage_records"), Dialect::Postgres);
        self.select(sql, params, |cells| query.decode(cells)).await
    }

    /// `usage_records`, schema-qualified and quoted.
    pub(crate) fn records_table(&self) -> String {
        self.table("usage_records")
    }

    /// Runs the statement `sql` with `params`; returns the rows it changed.
    pub(crate) async fn execute(&self, sql: String, params: Vec<Param>) -> Result<u64, UsageError> {
        let values = boxed(params);
        let refs = refs(&values);
        let mut slot = self.conn.lock().await;
        self.bounded(async {
            let conn = self.take(&mut slot).await?;
            let n = conn.client.execute(&sql, &refs).await?;
            *slot = Some(conn);
            Ok(n)
        })
        .await
    }

    /// The rows of `sql` with `params`, each read by `decode`.
    pub(crate) async fn select<T>(
        &self,
        sql: String,
        params: Vec<Param>,
        decode: impl Fn(&dyn Cells) -> Result<T, String>,
    ) -> Result<Vec<T>, UsageError> {
        let values = boxed(params);
        let refs = refs(&values);
        let mut slot = self.conn.lock().await;
        let rows = self
            .bounded(async {
                let conn = self.take(&mut slot).await?;
                let rows = conn.client.query(&sql, &refs).await?;
                *slot = Some(conn);
                Ok(rows)
            })
            .await?;
        drop(slot);
        rows.iter()
            .map(|row| decode(&PgCells(row)).map_err(|e| self.error(e)))
            .collect()
    }
}

/// `params` as PostgreSQL's client takes them.
fn boxed(params: Vec<Param>) -> Vec<Box<dyn ToSql + Sync + Send>> {
    params
        .into_iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                Param::Int(n) => Box::new(n),
                Param::Text(t) => Box::new(t),
            }
        })
        .collect()
}

/// `values` as the client's query methods take them.
fn refs(values: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    values
        .iter()
        .map(|v| v.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// `text` as PostgreSQL's `text` takes it: a NUL (which it refuses, failing the whole batch
/// and, as the batch is retried from the spill file, every batch after it) becomes U+FFFD. A
/// model name or a provider's error message is text a client or a provider controls.
fn pg_text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{fffd}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Runs a connection's I/O until it ends.
fn drive<F>(connection: F)
where
    F: Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "usage: PostgreSQL connection ended");
        }
    });
}

/// rustls with the Mozilla roots, on the `ring` provider (named here: more than one provider is
/// linked into llmroute, so rustls cannot pick one on its own).
fn tls() -> Result<MakeRustlsConnect, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The server's message (with its detail) when it sent one, else the client's.
fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        }
    }
}

struct PgCells<'a>(&'a tokio_postgres::Row);

impl Cells for PgCells<'_> {
    fn int(&self, i: usize) -> Result<i64, String> {
        self.0.try_get(i).map_err(|e| e.to_string())
    }
    fn float(&self, i: usize) -> Result<f64, String> {
        self.0.try_get(i).map_err(|e| e.to_string())
    }
    fn text(&self, i: usize) -> Result<String, String> {
        self.0.try_get(i).map_err(|e| e.to_string())
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        self.0.try_get(i).map_err(|e| e.to_string())
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        self.0.try_get(i).map_err(|e| e.to_string())
    }
    fn flag(&self, i: usize) -> Result<bool, String> {
        self.0.try_get(i).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod quoting {
    use super::*;

    #[test]
    fn a_schema_is_only_ever_a_name() {
        let sink = PostgresSink::new(
            "postgres://u@127.0.0.1/d",
            "a\"; DROP TABLE x; --",
            Duration::from_secs(1),
        )
        .expect("a PostgreSQL URL");
        assert_eq!(sink.quoted(), "\"a\"\"; DROP TABLE x; --\"");
        assert_eq!(
            sink.table("usage_records"),
            "\"a\"\"; DROP TABLE x; --\".usage_records"
        );
    }
}
