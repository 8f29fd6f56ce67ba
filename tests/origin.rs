//! A small HTTP/1.1 server on loopback for steps' outgoing requests in tests
//! (tests send traffic nowhere else). It records every request it reads and
//! answers by path:
//!
//! * `/ok`: 200, `hello`;
//! * `/redirect`: 302 to `/ok` on `localhost` (an origin written otherwise);
//! * `/moved/PORT/PATH`: 307 to `http://127.0.0.1:PORT/PATH` (another server);
//! * `/big`: 200 announcing 1 GiB, streamed until the client goes;
//! * `/hang`: never answers, holding the connection open;
//! * `POST /charges`, `POST /refunds`: a payment service (see [`Ledger`]);
//! * `POST /hooks`: a receiver of completion notifications, which answers
//!   the first of each `stepstone-delivery` 503 and the next 200;
//! * `POST /fenced-write`: a write fenced by its `fencing-token` (see
//!   [`FencedWrite`]): 200, or 409 for a token lower than one seen for its
//!   `idempotency-key`;
//! * anything else: 404.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The API key the payment service takes, as `authorization: Bearer KEY`.
pub const PAYMENTS_API_KEY: &str = "sk_test_stepstone_4f1d";

/// A request the server read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    /// The value of header `name` (lowercase), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A charge the payment service made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub id: String,
    pub order_id: String,
    pub amount_cents: u64,
    pub idempotency_key: String,
    pub refunded: bool,
}

impl Charge {
    fn to_json(&self) -> Value {
        json!({"charge_id": self.id, "order_id": self.order_id, "amount_cents": self.amount_cents})
    }
}

/// A write to `/fenced-write`, as the service took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedWrite {
    pub idempotency_key: String,
    pub fencing_token: u64,
    /// Whether it was done: its token was at least the highest seen for its key.
    pub accepted: bool,
}

/// The payment service's books. Like a real one it needs the API key and an
/// `idempotency-key`, and answers a key it has charged under with that
/// charge again; it refuses a `fencing-token` lower than one it saw for the
/// key, as a service does to fence off a host that lost the run. Unlike one, it answers the first request of every key 503
/// without charging, so every charge takes a retry; and while `holding`, it
/// makes a new charge but never answers, as when a host dies mid-request.
#[derive(Default)]
struct Ledger {
    charges: Vec<Charge>,
    refused_once: HashSet<String>,
    holding: bool,
    /// The deliveries of notifications answered 200, by id.
    delivered: Vec<String>,
    /// The highest fencing token seen for each idempotency key.
    tokens: std::collections::HashMap<String, u64>,
    fenced_writes: Vec<FencedWrite>,
}

impl Ledger {
    /// Whether `request` may act: its fencing token (if it has one and an
    /// idempotency key) is at least the highest seen for its key.
    fn admits(&mut self, request: &Received) -> bool {
        let key = request.header("idempotency-key");
        let token = request
            .header("fencing-token")
            .and_then(|token| token.parse::<u64>().ok());
        let (Some(key), Some(token)) = (key, token) else {
            return true;
        };
        let highest = self.tokens.entry(key.to_owned()).or_insert(token);
        if token < *highest {
            return false;
        }
        *highest = token;
        true
    }
}

/// The server; it lives as long as the test process.
#[derive(Clone)]
pub struct Origin {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    ledger: Arc<(Mutex<Ledger>, Condvar)>,
}

impl Origin {
    /// Starts a server on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("a bound address").port();
        let origin = Self {
            port,
            received: Arc::default(),
            ledger: Arc::default(),
        };
        let serving = origin.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let origin = serving.clone();
                std::thread::spawn(move || origin.serve(stream));
            }
        });
        origin
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`, the origin as an allowlist names it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request read so far.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The charges made so far.
    pub fn charges(&self) -> Vec<Charge> {
        self.ledger().charges.clone()
    }

    /// The writes to `/fenced-write` so far, in the order they came.
    pub fn fenced_writes(&self) -> Vec<FencedWrite> {
        self.ledger().fenced_writes.clone()
    }

    /// The notifications answered 200, by `stepstone-delivery` id.
    pub fn delivered(&self) -> Vec<String> {
        self.ledger().delivered.clone()
    }

    /// While `holding`, a new charge is made but never answered, and no
    /// notification is answered.
    pub fn hold_answers(&self, holding: bool) {
        self.ledger().holding = holding;
    }

    /// Waits until `count` charges are made, for at most `timeout`.
    pub fn await_charges(&self, count: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut ledger = self.ledger();
        while ledger.charges.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{count} charges were not made within {timeout:?}");
            ledger = self
                .ledger
                .1
                .wait_timeout(ledger, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The payment service's answer to `request`, or `None` to hold it.
    fn pay(&self, request: &Received) -> Option<(&'static str, Value)> {
        if request.header("authorization") != Some(&format!("Bearer {PAYMENTS_API_KEY}")) {
            return Some(("401 Unauthorized", json!({"error": "no valid API key"})));
        }
        let Some(key) = request.header("idempotency-key") else {
            return Some(("400 Bad Request", json!({"error": "no idempotency-key"})));
        };
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return Some(("400 Bad Request", json!({"error": "the body is not JSON"})));
        };
        let mut ledger = self.ledger();
        if !ledger.admits(request) {
            let fenced = json!({"error": "fenced: a later fencing token was seen for this idempotency key"});
            return Some(("409 Conflict", fenced));
        }
        if request.path == "/refunds" {
            let id = body["charge_id"].as_str().unwrap_or_default();
            let Some(charge) = ledger.charges.iter_mut().find(|c| c.id == id) else {
                return Some(("404 Not Found", json!({"error": format!("no charge {id}")})));
            };
            charge.refunded = true;
            return Some(("200 OK", json!({"refund_id": format!("re_{id}"), "charge_id": id})));
        }
        if let Some(charge) = ledger.charges.iter().find(|c| c.idempotency_key == key) {
            return Some(("200 OK", charge.to_json()));
        }
        if ledger.refused_once.insert(key.to_owned()) {
            return Some(("503 Service Unavailable", json!({"error": "try again"})));
        }
        let (Some(order_id), Some(amount_cents)) = (body["order_id"].as_str(), body["amount_cents"].as_u64()) else {
            return Some((
                "400 Bad Request",
                json!({"error": "order_id and amount_cents are required"}),
            ));
        };
        let charge = Charge {
            id: format!("ch_{}", ledger.charges.len() + 1),
            order_id: order_id.to_owned(),
            amount_cents,
            idempotency_key: key.to_owned(),
            refunded: false,
        };
        ledger.charges.push(charge.clone());
        self.ledger.1.notify_all();
        (!ledger.holding).then(|| ("200 OK", charge.to_json()))
    }

    /// Takes a write to `/fenced-write`; whether it was done.
    fn write_fenced(&self, request: &Received) -> bool {
        let mut ledger = self.ledger();
        let accepted = ledger.admits(request);
        let write = FencedWrite {
            idempotency_key: request.header("idempotency-key").unwrap_or_default().to_owned(),
            fencing_token: request
                .header("fencing-token")
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
            accepted,
        };
        ledger.fenced_writes.push(write);
        self.ledger.1.notify_all();
        accepted
    }

    /// The notification receiver's answer to `request`, or `None` to hold it.
    fn receive_hook(&self, request: &Received) -> Option<&'static str> {
        let mut ledger = self.ledger();
        if ledger.holding {
            return None;
        }
        let id = request.header("stepstone-delivery").unwrap_or_default().to_owned();
        if ledger.refused_once.insert(format!("hook {id}")) {
            return Some("503 Service Unavailable");
        }
        ledger.delivered.push(id);
        Some("200 OK")
    }

    /// Answers requests on one connection until the client closes it.
    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
        let mut writer = stream;
        while let Some(request) = read_request(&mut reader) {
            self.received
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(request.clone());
            let answered = match request.path.as_str() {
                "/ok" => answer(&mut writer, "200 OK", &[], b"hello"),
                "/redirect" => {
                    let location = format!("Location: http://localhost:{}/ok", self.port);
                    answer(&mut writer, "302 Found", &[&location], b"")
                }
                "/big" => stream_a_gibibyte(&mut writer),
                moved if moved.starts_with("/moved/") => {
                    let target = moved.trim_start_matches("/moved/");
                    let location = format!("Location: http://127.0.0.1:{target}");
                    answer(&mut writer, "307 Temporary Redirect", &[&location], b"")
                }
                "/charges" | "/refunds" if request.method == "POST" => match self.pay(&request) {
                    Some((status, body)) => answer(
                        &mut writer,
                        status,
                        &["Content-Type: application/json"],
                        body.to_string().as_bytes(),
                    ),
                    None => {
                        let _ = reader.read_to_end(&mut Vec::new());
                        return;
                    }
                },
                "/fenced-write" if request.method == "POST" => {
                    let status = if self.write_fenced(&request) {
                        "200 OK"
                    } else {
                        "409 Conflict"
                    };
                    answer(&mut writer, status, &[], b"")
                }
                "/hooks" if request.method == "POST" => match self.receive_hook(&request) {
                    Some(status) => answer(&mut writer, status, &[], b""),
                    None => {
                        let _ = reader.read_to_end(&mut Vec::new());
                        return;
                    }
                },
                "/hang" => {
                    // Holds the connection until the client drops it.
                    let _ = reader.read_to_end(&mut Vec::new());
                    return;
                }
                _ => answer(&mut writer, "404 Not Found", &[], b"no such path"),
            };
            if answered.is_err() {
                return;
            }
        }
    }
}

/// Reads one HTTP/1.1 request (its body by `Content-Length`); `None` once
/// the client has closed the connection or sent something else.
pub(crate) fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut length = 0;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok().filter(|n| *n > 0)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_owned());
            if name == "content-length" {
                length = value.parse().ok()?;
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        method,
        path,
        headers,
        body,
    })
}

/// Writes an answer with `status`, `headers` and `body`.
pub(crate) fn answer(writer: &mut TcpStream, status: &str, headers: &[&str], body: &[u8]) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    writer.write_all(body)
}

/// A loopback port whose listener never accepts and whose queue is full,
/// so a connection to it never opens (the kernel drops its SYNs), as to a
/// host gone quiet behind a firewall.
pub struct FullBacklog {
    _listener: TcpListener,
    _queued: TcpStream,
    port: u16,
}

impl FullBacklog {
    pub fn start() -> Self {
        use rustix::net::{AddressFamily, Ipv4Addr, SocketAddrV4, SocketType};
        let socket = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).expect("a socket");
        rustix::net::bind(&socket, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("a loopback port");
        // A backlog of 0 queues one connection; this test's own fills it.
        rustix::net::listen(&socket, 0).expect("listening");
        let listener = TcpListener::from(socket);
        let address = listener.local_addr().expect("a bound address");
        let queued = TcpStream::connect(address).expect("the one queued connection");
        Self {
            _listener: listener,
            _queued: queued,
            port: address.port(),
        }
    }

    /// `http://127.0.0.1:PORT`, the origin as an allowlist names it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Announces 1 GiB and writes it until the client stops reading.
fn stream_a_gibibyte(writer: &mut TcpStream) -> std::io::Result<()> {
    const GIB: usize = 1 << 30;
    writer.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n").as_bytes())?;
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..GIB / chunk.len() {
        writer.write_all(&chunk)?;
    }
    Ok(())
}
