//! A small HTTP/1.1 server on loopback for steps' outgoing requests in tests
//! (tests send traffic nowhere else). It records every request it reads and
//! answers by path:
//!
//! * `/ok`: 200, `hello`;
//! * `/redirect`: 302 to `/ok` on `localhost` (an origin written otherwise);
//! * `/big`: 200 announcing 1 GiB, streamed until the client goes;
//! * `/hang`: never answers, holding the connection open;
//! * anything else: 404.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

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

/// The server; it lives as long as the test process.
#[derive(Clone)]
pub struct Origin {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Origin {
    /// Starts a server on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("a bound address").port();
        let origin = Self {
            port,
            received: Arc::default(),
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

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
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

fn answer(writer: &mut TcpStream, status: &str, headers: &[&str], body: &[u8]) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    writer.write_all(body)
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
