//! Test support for llmroute: a throwaway Redis server per test.
//!
//! [`redis_server`] starts `redis-server` on a free port, persisting nothing, and stops it when
//! the guard drops. Without `redis-server` on `PATH` it falls back to `REDIS_URL`; with neither it
//! fails the test with instructions. It never skips silently.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// A Redis to test against, and a key namespace of this test's own.
#[derive(Debug)]
pub struct TestRedis {
    /// The URL to connect to.
    pub url: String,
    /// A namespace no other test uses.
    pub namespace: String,
    /// True when this guard started the server (and so owns all of its state and statistics).
    pub owned: bool,
    child: Option<Child>,
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
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
                    url,
                    namespace,
                    owned: true,
                    child: Some(child),
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
            child: None,
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
        self.port();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts an empty server on the same port again, after [`TestRedis::kill`].
    ///
    /// # Panics
    ///
    /// When it does not come up.
    pub fn restart(&mut self) {
        let port = self.port();
        self.kill();
        match spawn_on(port) {
            Ok(Some((child, _))) => self.child = Some(child),
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
        let pid = self.child.as_ref().expect("the server is running").id();
        let status = Command::new("kill")
            .args([which, &pid.to_string()])
            .status()
            .expect("`kill` runs");
        assert!(status.success(), "kill {which} {pid} failed");
    }
}

/// `Ok(None)`: no `redis-server` binary. `Err`: it started but did not come up.
fn spawn() -> Result<Option<(Child, String)>, String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    spawn_on(port)
}

/// Starts `redis-server` on `port`; see [`spawn`].
fn spawn_on(port: u16) -> Result<Option<(Child, String)>, String> {
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
        .args(["no", "--daemonize", "no", "--logfile", "", "--dir"])
        .arg(std::env::temp_dir())
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
