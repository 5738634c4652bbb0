//! One Redis server over plain TCP or a Unix socket, with no driver task: the task that calls
//! writes the command and reads the reply itself, on a connection it holds for that one call.
//!
//! A multiplexed connection hands every command to a task of its own that owns the socket,
//! and hands the reply back: two more task wake-ups per call. With a call or two a second per
//! instance, each after the process sat idle, those wake-ups are a large share of what a call
//! costs in CPU (`bench/run.sh --cpu`). Here connections wait in a small pool: a call takes an
//! idle one (or opens one), sends, reads the one reply, and puts it back. A call whose future is
//! dropped, that times out or that fails drops its connection with it, so a connection in the
//! pool never holds a reply nobody read; a failed one empties the pool, whose connections went
//! to the same server, so that the store's retry opens a fresh one.
//!
//! Replies are RESP2 (no HELLO is sent): `reply_len` finds where one ends, and redis-rs's parser
//! reads it, so that errors (NOSCRIPT included) come out as they do from redis-rs's connections.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use redis::aio::ConnectionLike;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, ProtocolVersion, RedisError,
    RedisFuture, RedisResult, Value,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// At most this many idle connections are kept (more open while more calls run at once).
const MAX_IDLE: usize = 8;

/// A byte stream to the server.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// One open connection and its read buffer.
struct Connection {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
}

/// Where to connect.
#[derive(Debug)]
enum Address {
    Tcp(String, u16),
    Unix(std::path::PathBuf),
}

/// A pool of direct connections to one server. Cloning is cheap and shares it.
#[derive(Clone)]
pub(super) struct Direct {
    inner: Arc<Inner>,
}

struct Inner {
    address: Address,
    /// AUTH and SELECT as one pipelined write, sent on each new connection (empty: none), and
    /// how many replies it has.
    hello: Vec<u8>,
    hello_replies: usize,
    db: i64,
    idle: Mutex<Vec<Connection>>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Direct {
    /// A pool for `info`, when a direct connection can serve it: plain TCP or a Unix socket,
    /// RESP2. `None` for TLS or RESP3 (those go through redis-rs's connection manager).
    pub(super) fn for_info(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Option<Self> {
        let address = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Address::Tcp(host.clone(), *port),
            ConnectionAddr::Unix(path) => Address::Unix(path.clone()),
            _ => return None,
        };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        let mut hello = Vec::new();
        let mut hello_replies = 0;
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password).write_packed_command(&mut hello);
            hello_replies += 1;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT")
                .arg(settings.db())
                .write_packed_command(&mut hello);
            hello_replies += 1;
        }
        Some(Self {
            inner: Arc::new(Inner {
                address,
                hello,
                hello_replies,
                db: settings.db(),
                idle: Mutex::new(Vec::new()),
                connect_timeout,
                response_timeout,
            }),
        })
    }

    /// Opens one connection now, and keeps it for the first call: fails as connecting would.
    pub(super) async fn connect_now(&self) -> RedisResult<()> {
        let conn = self.inner.connect().await?;
        self.inner.put_back(conn);
        Ok(())
    }

    /// Sends one packed command and reads its reply, within the response timeout.
    async fn call(self, packed: Vec<u8>) -> RedisResult<Value> {
        let timeout = self.inner.response_timeout;
        match tokio::time::timeout(timeout, self.inner.round_trip(&packed)).await {
            Ok(reply) => reply,
            Err(_elapsed) => {
                self.inner.drop_idle();
                Err(io::Error::new(io::ErrorKind::TimedOut, "Redis did not answer in time").into())
            }
        }
    }
}

impl Inner {
    async fn round_trip(&self, packed: &[u8]) -> RedisResult<Value> {
        let taken = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut conn = match taken {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        match send(&mut conn, packed, 1).await {
            Ok(mut replies) => {
                self.put_back(conn);
                Ok(replies.pop().unwrap_or(Value::Nil))
            }
            Err(e) => {
                self.drop_idle();
                Err(e)
            }
        }
    }

    async fn connect(&self) -> RedisResult<Connection> {
        let opened = tokio::time::timeout(self.connect_timeout, self.open()).await;
        let mut conn = match opened {
            Ok(conn) => conn?,
            Err(_elapsed) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "Redis did not accept a connection in time",
                )
                .into());
            }
        };
        if self.hello_replies > 0 {
            let replies = tokio::time::timeout(
                self.connect_timeout,
                send(&mut conn, &self.hello, self.hello_replies),
            )
            .await
            .map_err(|_elapsed| {
                io::Error::new(io::ErrorKind::TimedOut, "Redis did not answer AUTH in time")
            })??;
            for reply in replies {
                reply.extract_error()?;
            }
        }
        Ok(conn)
    }

    async fn open(&self) -> io::Result<Connection> {
        let stream: Box<dyn Stream> = match &self.address {
            Address::Tcp(host, port) => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                tcp.set_nodelay(true)?;
                Box::new(tcp)
            }
            Address::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
        };
        Ok(Connection {
            stream,
            buf: Vec::with_capacity(512),
        })
    }

    fn put_back(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(conn);
        }
    }

    /// Drops every idle connection: one failed, and the others went to the same server.
    fn drop_idle(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }
}

/// Writes `packed` and reads `replies` replies. Anything after them, or a reply that is not
/// RESP2, is a protocol error (the connection is then dropped by the caller).
async fn send(conn: &mut Connection, packed: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
    conn.stream.write_all(packed).await?;
    conn.buf.clear();
    let mut values = Vec::with_capacity(replies);
    let mut start = 0;
    while values.len() < replies {
        match reply_len(&conn.buf[start..]) {
            Ok(Some(len)) => {
                values.push(redis::parse_redis_value(&conn.buf[start..start + len])?);
                start += len;
            }
            Ok(None) => {
                let before = conn.buf.len();
                conn.buf.reserve(512);
                let read = conn.stream.read_buf(&mut conn.buf).await?;
                if read == 0 || conn.buf.len() == before {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "Redis closed the connection",
                    )
                    .into());
                }
            }
            Err(why) => return Err(protocol_error(why)),
        }
    }
    if start != conn.buf.len() {
        return Err(protocol_error("more bytes than the replies asked for"));
    }
    Ok(values)
}

fn protocol_error(why: &'static str) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "unexpected reply from Redis",
        why.to_string(),
    ))
}

/// The length of the one RESP2 reply at the start of `buf`; `None` while it is incomplete.
fn reply_len(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    let Some(line) = line_end(buf) else {
        return Ok(None);
    };
    let after = line + 2;
    match buf.first() {
        Some(b'+' | b'-' | b':') => Ok(Some(after)),
        Some(b'$') => match number(&buf[1..line])? {
            -1 => Ok(Some(after)),
            n if n >= 0 => {
                let end = after + n as usize + 2;
                Ok((buf.len() >= end).then_some(end))
            }
            _ => Err("a negative bulk length"),
        },
        Some(b'*') => match number(&buf[1..line])? {
            -1 => Ok(Some(after)),
            n if n >= 0 => {
                let mut at = after;
                for _ in 0..n {
                    match reply_len(&buf[at..])? {
                        Some(len) => at += len,
                        None => return Ok(None),
                    }
                }
                Ok(Some(at))
            }
            _ => Err("a negative array length"),
        },
        _ => Err("a reply type that is not RESP2"),
    }
}

/// Where the first `\r\n` starts.
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn number(digits: &[u8]) -> Result<i64, &'static str> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("a length that is not a number")
}

impl ConnectionLike for Direct {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.clone().call(cmd.get_packed_command()).boxed()
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // The store sends one script call at a time; a pipeline is never sent.
        async {
            Err(RedisError::from((
                ErrorKind::Client,
                "pipelines are not sent over a direct connection",
            )))
        }
        .boxed()
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use redis::{IntoConnectionInfo, Value};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;

    use super::{Direct, reply_len};

    fn direct(url: &str) -> Direct {
        let info = url.into_connection_info().unwrap();
        Direct::for_info(&info, Duration::from_secs(30), Duration::from_secs(30)).unwrap()
    }

    fn get() -> Vec<u8> {
        redis::cmd("GET").arg("k").get_packed_command()
    }

    /// A server that answers every command on its `n`-th connection with `:n`.
    async fn numbering_server() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(async move {
                    let mut buf = [0u8; 256];
                    while conn.read(&mut buf).await.is_ok_and(|read| read > 0) {
                        let reply = format!(":{n}\r\n");
                        if conn.write_all(reply.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn a_connection_serves_call_after_call() {
        let (url, accepted) = numbering_server().await;
        let direct = direct(&url);
        for _ in 0..3 {
            assert_eq!(direct.clone().call(get()).await.unwrap(), Value::Int(1));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn calls_at_once_each_have_a_connection() {
        let (url, accepted) = numbering_server().await;
        let direct = direct(&url);
        let (a, b) = tokio::join!(direct.clone().call(get()), direct.clone().call(get()));
        let mut got = [a.unwrap(), b.unwrap()];
        got.sort_by_key(|v| format!("{v:?}"));
        assert_eq!(got, [Value::Int(1), Value::Int(2)]);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// A call dropped while its reply is on the way (a timeout above it, a caller gone) takes
    /// its connection with it: the late reply is never read as the next call's.
    #[tokio::test]
    async fn a_dropped_call_leaves_no_reply_behind() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let (got_tx, got_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut buf = [0u8; 256];
            let (mut first, _) = listener.accept().await.unwrap();
            let _ = first.read(&mut buf).await;
            let _ = got_tx.send(());
            let _ = release_rx.await;
            let _ = first.write_all(b":1\r\n").await;
            let (mut second, _) = listener.accept().await.unwrap();
            while second.read(&mut buf).await.is_ok_and(|read| read > 0) {
                let _ = second.write_all(b":2\r\n").await;
            }
        });
        let direct = direct(&url);
        let mut first = Box::pin(direct.clone().call(get()));
        tokio::select! {
            reply = &mut first => panic!("answered before the server did: {reply:?}"),
            _ = got_rx => {}
        }
        drop(first);
        release_tx.send(()).unwrap();
        assert_eq!(direct.clone().call(get()).await.unwrap(), Value::Int(2));
    }

    #[tokio::test]
    async fn a_closed_connection_is_an_io_error_and_is_not_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut buf = [0u8; 256];
            let (mut first, _) = listener.accept().await.unwrap();
            let _ = first.read(&mut buf).await;
            drop(first);
            let (mut second, _) = listener.accept().await.unwrap();
            while second.read(&mut buf).await.is_ok_and(|read| read > 0) {
                let _ = second.write_all(b"$2\r\nok\r\n").await;
            }
        });
        let direct = direct(&url);
        let err = direct.clone().call(get()).await.unwrap_err();
        assert!(err.is_io_error(), "{err:?}");
        assert_eq!(
            direct.clone().call(get()).await.unwrap(),
            Value::BulkString(b"ok".to_vec())
        );
    }

    #[test]
    fn the_url_says_what_to_send_on_connecting() {
        let d = direct("redis://app:s3cret@127.0.0.1:6379/3");
        let mut want = Vec::new();
        redis::cmd("AUTH")
            .arg("app")
            .arg("s3cret")
            .write_packed_command(&mut want);
        redis::cmd("SELECT").arg(3).write_packed_command(&mut want);
        assert_eq!(d.inner.hello, want);
        assert_eq!(d.inner.hello_replies, 2);
        let plain = direct("redis://127.0.0.1:6379");
        assert!(plain.inner.hello.is_empty());
        let tls = "rediss://127.0.0.1:6379".into_connection_info().unwrap();
        assert!(Direct::for_info(&tls, Duration::ZERO, Duration::ZERO).is_none());
    }

    #[test]
    fn replies_are_framed_whole_or_not_at_all() {
        let whole: &[&[u8]] = &[
            b"+OK\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"$3\r\nabc\r\n",
            b"$0\r\n\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n:-2\r\n$2\r\nab\r\n",
            b"*2\r\n*1\r\n:1\r\n*0\r\n",
        ];
        for reply in whole {
            assert_eq!(reply_len(reply), Ok(Some(reply.len())), "{reply:?}");
            for cut in 0..reply.len() {
                assert_eq!(reply_len(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
            }
            let mut two = reply.to_vec();
            two.extend_from_slice(b":7\r\n");
            assert_eq!(
                reply_len(&two),
                Ok(Some(reply.len())),
                "{reply:?} then more"
            );
        }
    }

    #[test]
    fn what_is_not_resp2_is_refused() {
        assert!(reply_len(b"%1\r\n").is_err());
        assert!(reply_len(b"$x\r\n").is_err());
        assert!(reply_len(b"*-5\r\n").is_err());
    }
}
