//! The HTTP server's limits against misbehaving clients: body size before content type,
//! slow or half-sent request headers, idle keep-alive connections.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::{FLEET, InProcess, TempDir, http, post};

fn service(dir: &TempDir) -> (InProcess, String) {
    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        "database: {url: \"sqlite://state.db\"}\nsources: {file: fleet.yaml}\n\
         api: {bind: \"127.0.0.1:0\", maxBodyBytes: 65536, headerTimeout: 1}\n",
    );
    let service = InProcess::start(&path);
    let url = service.api.clone();
    (service, url)
}

#[test]
fn bodies_are_measured_before_their_type() {
    let dir = TempDir::new("http-bodies");
    let (service, url) = service(&dir);
    let ingress = format!("{url}/v1/ingress");
    let addr = url.trim_start_matches("http://").to_owned();
    // The decision is served in front of the router, the gate through it: both alike.
    for path in ["/v1/ingress", "/v1/gate/owned"] {
        for content_type in [None, Some("text/plain"), Some("application/json")] {
            assert_eq!(
                post_1mb(&addr, path, content_type),
                413,
                "{path} {content_type:?}"
            );
        }
    }
    let small = r#"{"platform":"onebot","self_id":1,"group_id":2,"user_id":3,"text":"t","time":1,"lane":"chat"}"#;
    let status = http()
        .post(&ingress)
        .header("Content-Type", "text/plain")
        .send(small)
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 415);
    let (status, body) = post(&ingress, None, &serde_json::from_str(small).unwrap());
    assert_eq!(status, 200, "{body}");
    // Other methods than POST are the router's: 405, not a decision.
    assert_eq!(crate::support::get(&ingress, None).0, 405);
    drop(service);
}

/// A body that stops arriving gets 408 after 10 s, on the decision (in front of the router)
/// and on a route of the router alike; the service answers others meanwhile.
#[test]
fn stalled_bodies_time_out() {
    let dir = TempDir::new("http-stalled");
    let (service, url) = service(&dir);
    let addr = url.trim_start_matches("http://").to_owned();
    let stalled: Vec<_> = ["/v1/ingress", "/v1/gate/owned"]
        .into_iter()
        .map(|path| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(&addr).unwrap();
                write!(
                    stream,
                    "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: 100\r\n\r\n{{\"platform\":"
                )
                .unwrap();
                let started = Instant::now();
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                let mut response = String::new();
                let _ = stream.read_to_string(&mut response);
                (path, started.elapsed(), response)
            })
        })
        .collect();
    assert_eq!(crate::support::get(&format!("{url}/healthz"), None).0, 200);
    for thread in stalled {
        let (path, elapsed, response) = thread.join().unwrap();
        assert!(response.starts_with("HTTP/1.1 408"), "{path}: {response}");
        assert!(
            response.contains("did not arrive within 10s"),
            "{path}: {response}"
        );
        assert!(
            elapsed >= Duration::from_secs(9),
            "{path}: after {elapsed:?}"
        );
    }
    drop(service);
}

/// POSTs a 1 MB body to `path` and returns the status. The server answers before the body is
/// all sent and closes, so the body is written beside the read and its errors are ignored.
fn post_1mb(addr: &str, path: &str, content_type: Option<&str>) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n",
        1 << 20
    );
    if let Some(t) = content_type {
        head.push_str(&format!("Content-Type: {t}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let chunk = vec![b'x'; 16 * 1024];
        for _ in 0..64 {
            if writer.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut response = [0u8; 12];
    stream.read_exact(&mut response).unwrap();
    let _ = sending.join();
    std::str::from_utf8(&response[9..12])
        .unwrap()
        .parse()
        .unwrap()
}

/// 500 connections that send half a request head are closed after `api.headerTimeout`, and
/// the service keeps answering meanwhile.
#[test]
fn slow_request_headers_are_cut_off() {
    let dir = TempDir::new("http-slow");
    let (service, url) = service(&dir);
    let addr = url.trim_start_matches("http://").to_owned();
    let mut slow: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
            s
        })
        .collect();
    // An idle keep-alive connection is closed after the same time.
    let mut idle = TcpStream::connect(&addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    assert_eq!(crate::support::get(&format!("{url}/healthz"), None).0, 200);
    for s in slow.iter_mut().chain(std::iter::once(&mut idle)) {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        // Read until the server closes: EOF (or a reset), never the 10 s timeout.
        let result = s.read_to_end(&mut buf);
        assert!(
            result.is_ok()
                || result
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{result:?}"
        );
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "closed after {elapsed:?}");
    assert_eq!(crate::support::get(&format!("{url}/healthz"), None).0, 200);
    drop(service);
}

/// Decisions on one keep-alive connection: a body that arrives in pieces, then a chunked one,
/// are decided whole; an answer carries its own headers, none of the request's.
#[test]
fn bodies_in_pieces_are_decided_whole() {
    let dir = TempDir::new("http-pieces");
    let (service, url) = service(&dir);
    let addr = url.trim_start_matches("http://").to_owned();
    let body = r#"{"platform":"onebot","self_id":1,"group_id":2,"user_id":3,"text":"t","time":1,"lane":"chat"}"#;
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /v1/ingress HTTP/1.1\r\nHost: x\r\nX-Request-Only: 1\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (first, rest) = body.split_at(30);
    let (second, third) = rest.split_at(30);
    for piece in [&head, first, second, third] {
        stream.write_all(piece.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let (answer_head, answer) = read_answer(&mut stream);
    assert!(answer_head.starts_with("HTTP/1.1 200"), "{answer_head}");
    assert!(answer.contains(r#""handle":"#), "{answer}");
    assert!(
        !answer_head.to_ascii_lowercase().contains("x-request-only"),
        "{answer_head}"
    );
    let (first, second) = body.split_at(40);
    write!(
        stream,
        "POST /v1/ingress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n",
        first.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    write!(stream, "{:x}\r\n{second}\r\n0\r\n\r\n", second.len()).unwrap();
    let (answer_head, answer) = read_answer(&mut stream);
    assert!(answer_head.starts_with("HTTP/1.1 200"), "{answer_head}");
    assert!(answer.contains(r#""handle":"#), "{answer}");
    drop(service);
}

/// One answer's head and body (by its Content-Length) from a keep-alive connection.
fn read_answer(stream: &mut TcpStream) -> (String, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}
