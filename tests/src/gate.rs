//! A TCP gate in front of a server (PostgreSQL, say): a forwarder on a free port of 127.0.0.1
//! that a test closes to make the server unreachable, pauses to make it stop answering, and
//! opens again, while the server itself keeps running.
//!
//! Plain threads, no async runtime: it works the same under any Tokio runtime flavour, in tests
//! and in benches.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// What the gate does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// New connections are forwarded; forwarded ones carry bytes both ways.
    Open,
    /// New connections are accepted and dropped at once; none is forwarded.
    Closed,
    /// New connections are accepted and held unanswered; forwarded ones carry nothing.
    Paused,
}

#[derive(Debug)]
struct State {
    mode: Mode,
    /// Bumped by every close: a connection forwarded before it never carries a byte again.
    generation: u64,
    /// Both sockets of each forwarded connection, by number: to cut them.
    links: HashMap<u64, (TcpStream, TcpStream)>,
    next_link: u64,
    /// Connections accepted while paused: forwarded when the gate opens.
    held: Vec<TcpStream>,
    /// The gate is being dropped.
    stopped: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when the mode changes (wakes the forwarding threads waiting out a pause).
    changed: Condvar,
    target: SocketAddr,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Cuts every forwarded connection and drops the held ones.
    fn cut_all(&mut self) {
        for (_, (client, server)) in self.links.drain() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        self.held.clear();
    }
}

/// A forwarder from 127.0.0.1:`port` to a target address. Open when made; cuts everything and
/// stops when dropped.
#[derive(Debug)]
pub struct Gate {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Gate {
    /// An open gate on a free port of 127.0.0.1 to `target` (`host:port`).
    ///
    /// # Panics
    ///
    /// When `target` does not resolve or no port can be bound.
    pub fn new(target: impl ToSocketAddrs) -> Gate {
        let target = target
            .to_socket_addrs()
            .expect("the gate's target resolves")
            .next()
            .expect("the gate's target has an address");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
        let addr = listener.local_addr().expect("the bound port's address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                mode: Mode::Open,
                generation: 0,
                links: HashMap::new(),
                next_link: 0,
                held: Vec::new(),
                stopped: false,
            }),
            changed: Condvar::new(),
            target,
        });
        let accepting = shared.clone();
        let acceptor = std::thread::spawn(move || accept(&listener, &accepting));
        Gate {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Where to connect: 127.0.0.1 and the gate's port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The gate's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Makes the target unreachable: every forwarded connection is cut now, and from now on a
    /// new connection is accepted and dropped at once (the client reads the end of the stream).
    pub fn close(&self) {
        let mut state = self.shared.lock();
        state.mode = Mode::Closed;
        state.generation += 1;
        state.cut_all();
        self.shared.changed.notify_all();
    }

    /// Makes the target stop answering, as a frozen server would: forwarded connections stay
    /// up but carry nothing, new ones are accepted and left waiting. [`Gate::open`] forwards
    /// all of it again (the bytes held meanwhile included); [`Gate::close`] cuts it.
    pub fn pause(&self) {
        self.shared.lock().mode = Mode::Paused;
        self.shared.changed.notify_all();
    }

    /// Forwards again: new connections reach the target; after a pause, the connections held
    /// meanwhile are forwarded and the paused ones carry bytes again.
    pub fn open(&self) {
        let (held, generation) = {
            let mut state = self.shared.lock();
            state.mode = Mode::Open;
            self.shared.changed.notify_all();
            (std::mem::take(&mut state.held), state.generation)
        };
        for client in held {
            forward(&self.shared, client, generation);
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopped = true;
            state.mode = Mode::Closed;
            state.generation += 1;
            state.cut_all();
            self.shared.changed.notify_all();
        }
        // Wake the accepting thread so it sees `stopped`.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Takes connections until the gate is dropped.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        match state.mode {
            Mode::Closed => drop(client),
            Mode::Paused => state.held.push(client),
            Mode::Open => {
                let generation = state.generation;
                drop(state);
                forward(shared, client, generation);
            }
        }
    }
}

/// Connects `client` to the target, unless the gate closed since `generation`; dropping
/// `client` otherwise.
fn forward(shared: &Arc<Shared>, client: TcpStream, generation: u64) {
    let Ok(server) = TcpStream::connect(shared.target) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let clones = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    );
    let (Ok(client_out), Ok(server_in), Ok(client_cut), Ok(server_cut)) = clones else {
        return;
    };
    let link = {
        let mut state = shared.lock();
        if state.stopped || state.mode == Mode::Closed || state.generation != generation {
            return;
        }
        let link = state.next_link;
        state.next_link += 1;
        state.links.insert(link, (client_cut, server_cut));
        link
    };
    let up = shared.clone();
    std::thread::spawn(move || pipe(client, server, &up, generation, link));
    let down = shared.clone();
    std::thread::spawn(move || pipe(server_in, client_out, &down, generation, link));
}

/// Copies `from` to `to` until either ends or the gate cuts them, waiting out pauses; then cuts
/// both ways of the connection.
fn pipe(mut from: TcpStream, mut to: TcpStream, shared: &Shared, generation: u64, link: u64) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let carry = {
            let mut state = shared.lock();
            while state.mode == Mode::Paused && state.generation == generation && !state.stopped {
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            state.mode == Mode::Open && state.generation == generation && !state.stopped
        };
        if !carry || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    shared.lock().links.remove(&link);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answering each line with the same line.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("its address");
        std::thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                std::thread::spawn(move || {
                    let mut write = conn.try_clone().expect("a second handle");
                    let _ = std::io::copy(&mut &conn, &mut write);
                });
            }
        });
        addr
    }

    fn round_trip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text)?;
        let mut back = vec![0u8; text.len()];
        stream.read_exact(&mut back)?;
        Ok(back)
    }

    #[test]
    fn forwards_refuses_when_closed_and_forwards_again_when_opened() {
        let gate = Gate::new(echo());
        let mut first = TcpStream::connect(gate.addr()).expect("connects");
        assert_eq!(round_trip(&mut first, b"one").expect("echoed"), b"one");

        gate.close();
        // The open connection is cut...
        assert!(round_trip(&mut first, b"two").is_err());
        // ...and a new one is accepted, then ended at once.
        let mut refused = TcpStream::connect(gate.addr()).expect("accepted");
        let mut rest = Vec::new();
        assert!(refused.read_to_end(&mut rest).map_or(true, |n| n == 0));

        gate.open();
        let mut again = TcpStream::connect(gate.addr()).expect("connects");
        assert_eq!(round_trip(&mut again, b"three").expect("echoed"), b"three");
    }

    #[test]
    fn a_pause_holds_bytes_until_the_gate_opens() {
        let gate = Gate::new(echo());
        let mut conn = TcpStream::connect(gate.addr()).expect("connects");
        assert_eq!(round_trip(&mut conn, b"a").expect("echoed"), b"a");

        gate.pause();
        conn.set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .expect("a read timeout");
        let err = round_trip(&mut conn, b"b").expect_err("no answer while paused");
        assert!(matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ));
        let mut waiting = TcpStream::connect(gate.addr()).expect("accepted, held");

        gate.open();
        conn.set_read_timeout(None).expect("no read timeout");
        let mut back = [0u8; 1];
        conn.read_exact(&mut back).expect("the held byte, echoed");
        assert_eq!(&back, b"b");
        assert_eq!(round_trip(&mut waiting, b"c").expect("echoed"), b"c");
    }
}
