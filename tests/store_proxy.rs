//! A TCP proxy between one host and the store: while cut, it drops every
//! connection it carries and refuses new ones, as a network partition
//! between that host and the store would; mended, it carries them again.
//!
//! Invariant: nothing passes while it is cut: a connection accepted is
//! either carried whole before the cut or dropped at it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The proxy, listening on loopback until the test process ends.
pub struct StoreProxy {
    address: SocketAddr,
    cut: Arc<AtomicBool>,
    carried: Arc<Mutex<Vec<TcpStream>>>,
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
        };
        let (cut, carried) = (proxy.cut.clone(), proxy.carried.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                carry(client, server, &carried);
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
        let carried = std::mem::take(&mut *self.carried.lock().unwrap_or_else(|p| p.into_inner()));
        for stream in carried {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn mend(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Pumps bytes both ways between `client` and `server` on threads of their
/// own, the sockets kept where a cut can shut them.
fn carry(client: TcpStream, server: TcpStream, carried: &Mutex<Vec<TcpStream>>) {
    let clones = [client.try_clone(), server.try_clone()];
    let [Ok(client_side), Ok(server_side)] = clones else {
        return;
    };
    carried
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend([client_side, server_side]);
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(move || pump(client_in, server));
    std::thread::spawn(move || pump(server_in, client));
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0 || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
