//! A minimal HTTP/1.1 server for the metrics endpoint: a fixed pool of
//! threads, each taking one connection at a time with a deadline for the
//! request head and a write timeout, one request per connection. A client
//! that connects and sends nothing (or trickles bytes) holds one thread
//! for at most `HEAD_DEADLINE`; the thread count never grows.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Threads serving connections.
pub const THREADS: usize = 4;
/// The whole request head must arrive within this.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head taken.
const MAX_HEAD: usize = 8 * 1024;

/// An answer: status code, content type, body.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// Answers a request: `(method, path without the query)`.
pub type Handler = dyn Fn(&str, &str) -> Response + Send + Sync;

/// Serves `listener` on `THREADS` threads named `name`.
pub fn serve(listener: TcpListener, name: &str, handler: Arc<Handler>) -> Result<(), String> {
    let listener = Arc::new(listener);
    for i in 0..THREADS {
        let (listener, handler) = (listener.clone(), handler.clone());
        std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn(move || loop {
                match listener.accept() {
                    Ok((stream, _)) => serve_one(stream, &*handler),
                    // Out of descriptors and the like: do not spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            })
            .map_err(|e| format!("{name} thread: {e}"))?;
    }
    Ok(())
}

fn serve_one(mut stream: TcpStream, handler: &Handler) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Some(head) = read_head(&mut stream) else {
        return;
    };
    let line = head.lines().next().unwrap_or_default();
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or_default(), words.next());
    let response = match target {
        Some(t) if words.next().is_some_and(|v| v.starts_with("HTTP/")) => {
            handler(method, t.split('?').next().unwrap_or_default())
        }
        _ => Response {
            status: 400,
            content_type: "text/plain; charset=utf-8",
            body: "bad request\n".into(),
        },
    };
    let reason = match response.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        response.content_type,
        response.body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(response.body.as_bytes());
    }
    if let Err(e) = stream.write_all(&out) {
        log::debug!("metrics: {e}");
    }
}

/// The request head (up to the blank line), or `None` when the client is
/// too slow, too long-winded or gone.
fn read_head(stream: &mut TcpStream) -> Option<String> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.checked_duration_since(Instant::now())?;
        if left.is_zero() || head.len() > MAX_HEAD {
            return None;
        }
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        serve(
            l,
            "http-test",
            Arc::new(|m: &str, p: &str| Response {
                status: 200,
                content_type: "text/plain",
                body: format!("{m} {p}\n"),
            }),
        )
        .unwrap();
        addr
    }

    fn get(addr: std::net::SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn answers_one_request_per_connection() {
        let addr = start();
        let r = get(addr, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Length: 13\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nGET /metrics\n"), "{r}");
        let r = get(addr, "HEAD / HTTP/1.0\r\n\r\n");
        assert!(r.ends_with("\r\n\r\n"), "no body for HEAD: {r}");
        let r = get(addr, "nonsense\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    }

    #[test]
    fn silent_clients_cannot_take_every_thread() {
        let addr = start();
        // More silent clients than threads: each is dropped at the deadline.
        let silent: Vec<TcpStream> = (0..THREADS * 2)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let t = Instant::now();
        let r = get(addr, "GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(
            t.elapsed() < HEAD_DEADLINE * 3 + Duration::from_secs(5),
            "answered after {:?}",
            t.elapsed()
        );
        drop(silent);
    }
}
