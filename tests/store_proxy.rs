//! A TCP proxy between one host and the store: while cut, it drops every
//! connection it carries and refuses new ones, as a network partition
//! between that host and the store would; mended, it carries them again.
//! It can also hold back the requests for one kind of key (read from each
//! HTTP/1.1 request's head) for a while, the others passing at once: a
//! host whose heartbeats are slow while its journal writes are not.
//!
//! Invariant: nothing passes while it is cut: a connection accepted is
//! either carried whole before the cut or dropped at it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Requests whose path holds `path`, held back `by` before they pass.
#[derive(Clone)]
struct Delay {
    path: String,
    by: Duration,
}

/// The proxy, listening on loopback until the test process ends.
pub struct StoreProxy {
    address: SocketAddr,
    cut: Arc<AtomicBool>,
    carried: Arc<Mutex<Vec<TcpStream>>>,
    delay: Arc<Mutex<Option<Delay>>>,
}

impl StoreProxy {
    /// A proxy to `upstream` (`http://host:port`, as an S3 endpoint is
    /// written).
    pub fn start(upstream: &str) -> Self {
        let upstream = upstream
            .strip_prefix("http://")
            .unwrap_or(upstream)
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the proxy");
        let proxy = Self {
            address: listener.local_addr().expect("the proxy's address"),
            cut: Arc::default(),
            carried: Arc::default(),
            delay: Arc::default(),
        };
        let (cut, carried, delay) = (proxy.cut.clone(), proxy.carried.clone(), proxy.delay.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                carry(client, server, &carried, &delay);
            }
        });
        proxy
    }

    /// What a host sets as its S3 endpoint to go through the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Drops every connection and refuses new ones until [`mend`](Self::mend).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let carried = std::mem::take(&mut *lock(&self.carried));
        for stream in carried {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn mend(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Holds every request whose path holds `path` back `by` before it
    /// passes, until [`undelay`](Self::undelay).
    pub fn delay(&self, path: &str, by: Duration) {
        *lock(&self.delay) = Some(Delay {
            path: path.to_owned(),
            by,
        });
    }

    pub fn undelay(&self) {
        *lock(&self.delay) = None;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Pumps bytes both ways between `client` and `server` on threads of their
/// own, the sockets kept where a cut can shut them.
fn carry(client: TcpStream, server: TcpStream, carried: &Mutex<Vec<TcpStream>>, delay: &Arc<Mutex<Option<Delay>>>) {
    let clones = [client.try_clone(), server.try_clone()];
    let [Ok(client_side), Ok(server_side)] = clones else {
        return;
    };
    lock(carried).extend([client_side, server_side]);
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let delay = delay.clone();
    std::thread::spawn(move || pump_requests(client_in, server, &delay));
    std::thread::spawn(move || pump(server_in, client));
}

/// Pumps requests from a host to the store one at a time, holding back
/// those the delay names. A request is its head (to the blank line) and
/// as many bytes of body as its `Content-Length` says.
fn pump_requests(from: TcpStream, mut to: TcpStream, delay: &Mutex<Option<Delay>>) {
    let mut from = std::io::BufReader::new(from);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            match std::io::BufRead::read_until(&mut from, b'\n', &mut line) {
                Ok(0) | Err(_) => return shut(&to),
                Ok(_) => head.extend_from_slice(&line),
            }
            if line == b"\r\n" {
                break;
            }
        }
        let head_text = String::from_utf8_lossy(&head);
        let path = head_text.split(' ').nth(1).unwrap_or_default();
        if let Some(Delay { by, .. }) = lock(delay).clone().filter(|d| path.contains(&d.path)) {
            std::thread::sleep(by);
        }
        let length = head_text
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<u64>().ok())?
            })
            .unwrap_or(0);
        let mut body = Vec::new();
        let forwarded = to.write_all(&head).is_ok()
            && (&mut from).take(length).read_to_end(&mut body).is_ok()
            && to.write_all(&body).is_ok();
        if !forwarded {
            return shut(&to);
        }
    }
}

fn shut(stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0 || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    shut(&to);
}
