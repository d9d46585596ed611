//! A local Lambda Runtime API: what a `bootstrap` talks to inside Lambda,
//! served on 127.0.0.1 so a test or benchmark can run the real release
//! binary as a process (`AWS_LAMBDA_RUNTIME_API=<`[`RuntimeApi::address`]`>`),
//! hand it invocations and read its answers.
//!
//! Implemented routes (the runtime's side of the [Runtime API]):
//!
//! - `GET /2018-06-01/runtime/invocation/next`: waits for the next
//!   invocation, answered with its payload and the
//!   `Lambda-Runtime-Aws-Request-Id`, `Lambda-Runtime-Deadline-Ms`,
//!   `Lambda-Runtime-Invoked-Function-Arn` and `Lambda-Runtime-Trace-Id`
//!   headers;
//! - `POST /2018-06-01/runtime/invocation/{id}/response` and `…/error`: the
//!   outcome of an invocation, returned by [`RuntimeApi::invoke`];
//! - `POST /2018-06-01/runtime/init/error`: kept, see
//!   [`RuntimeApi::init_error`].
//!
//! HTTP/1.1 with keep-alive, bodies by `Content-Length` or chunked; a
//! request is parsed with `httparse` (the parser under hyper), so the
//! workspace's hyper keeps the features the SDK gives it.
//!
//! [Runtime API]: https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

const PREFIX: &str = "/2018-06-01/runtime/";

/// The command that starts `binary` as a function process on `api`: only
/// the variables Lambda sets (`AWS_LAMBDA_RUNTIME_API`, the function's
/// name, memory and version), instance metadata off, `RUST_LOG=warn`, no
/// stdin, stdout and stderr discarded. Add the function's own variables
/// (and a region and credentials, where the binary needs them) with
/// `.env`, and keep its output with `.stdout`/`.stderr`.
pub fn function_command(binary: &std::path::Path, api: &RuntimeApi) -> std::process::Command {
    use std::process::Stdio;
    let mut cmd = std::process::Command::new(binary);
    cmd.env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", api.address())
        .env("AWS_LAMBDA_FUNCTION_NAME", "local")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}
/// A started function process, killed (and reaped) when dropped.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The function ARN every invocation names.
pub const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:local";

/// How the function answered one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `POST …/response`: the body.
    Response(Vec<u8>),
    /// `POST …/error`: `Lambda-Runtime-Function-Error-Type` and the body.
    Error {
        /// The `Lambda-Runtime-Function-Error-Type` header (empty if the
        /// function sent none).
        error_type: String,
        /// The body as posted (Lambda's error JSON: `errorType`,
        /// `errorMessage`).
        body: Vec<u8>,
    },
}

impl Outcome {
    /// The response body as JSON (panics on an error outcome: a test wants
    /// to see it).
    pub fn json(&self) -> serde_json::Value {
        match self {
            Outcome::Response(body) => serde_json::from_slice(body).expect("a JSON response"),
            Outcome::Error { error_type, body } => panic!(
                "the function failed: {error_type}: {}",
                String::from_utf8_lossy(body)
            ),
        }
    }
}

struct Invocation {
    id: String,
    deadline_ms: u128,
    payload: Vec<u8>,
}

struct State {
    queue: Mutex<mpsc::UnboundedReceiver<Invocation>>,
    pending: std::sync::Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// When the first `GET …/next` arrived.
    first_next: watch::Sender<Option<Instant>>,
    init_error: std::sync::Mutex<Option<Outcome>>,
}

/// A Runtime API on a free loopback port; stops serving when dropped.
pub struct RuntimeApi {
    address: SocketAddr,
    state: Arc<State>,
    invocations: mpsc::UnboundedSender<Invocation>,
    next_id: AtomicU64,
    server: JoinHandle<()>,
}

impl RuntimeApi {
    /// Listen on 127.0.0.1 (a free port) and serve in a task of the
    /// current runtime.
    pub async fn start() -> std::io::Result<RuntimeApi> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (invocations, queue) = mpsc::unbounded_channel();
        let state = Arc::new(State {
            queue: Mutex::new(queue),
            pending: Default::default(),
            first_next: watch::channel(None).0,
            init_error: Default::default(),
        });
        let served = state.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(stream, served.clone()));
            }
        });
        Ok(RuntimeApi {
            address,
            state,
            invocations,
            next_id: AtomicU64::new(1),
            server,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// Hand the function one invocation and wait for its outcome. The
    /// deadline header is `timeout` from now.
    pub async fn invoke(&self, payload: Vec<u8>, timeout: Duration) -> Outcome {
        let deadline_ms = (SystemTime::now() + timeout)
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        self.invoke_with_deadline_header(payload, deadline_ms).await
    }

    /// [`RuntimeApi::invoke`] with `deadline_ms` as the deadline header,
    /// whatever it means: a local emulator's placeholder (cargo-lambda
    /// sends `600000`) or a deadline already past.
    pub async fn invoke_with_deadline_header(
        &self,
        payload: Vec<u8>,
        deadline_ms: u128,
    ) -> Outcome {
        let id = format!(
            "00000000-0000-4000-8000-{:012x}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        self.state
            .pending
            .lock()
            .expect("not poisoned")
            .insert(id.clone(), tx);
        self.invocations
            .send(Invocation {
                id,
                deadline_ms,
                payload,
            })
            .expect("the server holds the queue");
        rx.await.expect("the server answers every invocation")
    }

    /// When the function first asked for an invocation (`GET …/next`):
    /// waits for it.
    pub async fn first_next(&self) -> Instant {
        let mut seen = self.state.first_next.subscribe();
        let at = seen
            .wait_for(Option::is_some)
            .await
            .expect("the sender lives in the state");
        at.expect("waited for Some")
    }

    /// What the function posted to `…/init/error`, if anything.
    pub fn init_error(&self) -> Option<Outcome> {
        self.state.init_error.lock().expect("not poisoned").clone()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn serve_connection(mut stream: TcpStream, state: Arc<State>) {
    let mut buf = Vec::with_capacity(8192);
    loop {
        let request = match read_request(&mut stream, &mut buf).await {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => return,
        };
        let written = match route(&request, &state).await {
            Reply::Invocation(inv) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     lambda-runtime-aws-request-id: {}\r\n\
                     lambda-runtime-deadline-ms: {}\r\n\
                     lambda-runtime-invoked-function-arn: {FUNCTION_ARN}\r\n\
                     lambda-runtime-trace-id: Root=1-00000000-000000000000000000000000;Sampled=0\r\n\
                     content-length: {}\r\n\r\n",
                    inv.id,
                    inv.deadline_ms,
                    inv.payload.len()
                );
                write_all(&mut stream, head.as_bytes(), &inv.payload).await
            }
            Reply::Status(code, reason) => {
                let body = format!("{{\"status\":\"{reason}\"}}");
                let head = format!(
                    "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                write_all(&mut stream, head.as_bytes(), body.as_bytes()).await
            }
        };
        if written.is_err() {
            return;
        }
    }
}

async fn write_all(stream: &mut TcpStream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    stream.write_all(head).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

enum Reply {
    Invocation(Invocation),
    Status(u16, &'static str),
}

async fn route(request: &Request, state: &State) -> Reply {
    let Some(path) = request.path.strip_prefix(PREFIX) else {
        return Reply::Status(404, "Not Found");
    };
    let error = || Outcome::Error {
        error_type: request
            .header("lambda-runtime-function-error-type")
            .unwrap_or("")
            .to_owned(),
        body: request.body.clone(),
    };
    match (request.method.as_str(), path) {
        ("GET", "invocation/next") => {
            state.first_next.send_if_modified(|at| {
                at.is_none() && {
                    *at = Some(Instant::now());
                    true
                }
            });
            match state.queue.lock().await.recv().await {
                Some(inv) => Reply::Invocation(inv),
                None => Reply::Status(500, "Closed"),
            }
        }
        ("POST", "init/error") => {
            *state.init_error.lock().expect("not poisoned") = Some(error());
            Reply::Status(202, "Accepted")
        }
        ("POST", rest) => {
            let Some((id, what)) = rest
                .strip_prefix("invocation/")
                .and_then(|r| r.rsplit_once('/'))
            else {
                return Reply::Status(404, "Not Found");
            };
            let outcome = match what {
                "response" => Outcome::Response(request.body.clone()),
                "error" => error(),
                _ => return Reply::Status(404, "Not Found"),
            };
            match state.pending.lock().expect("not poisoned").remove(id) {
                Some(waiter) => {
                    let _ = waiter.send(outcome);
                    Reply::Status(202, "Accepted")
                }
                None => Reply::Status(400, "Unknown request id"),
            }
        }
        _ => Reply::Status(404, "Not Found"),
    }
}

/// One request from the connection (`None`: closed between requests).
/// `buf` carries bytes read past the previous request.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Request>> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let (head_len, method, path, headers) = loop {
        let mut parsed = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut parsed);
        match req.parse(buf).map_err(|e| invalid(&e.to_string()))? {
            httparse::Status::Complete(n) => {
                let headers = req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_owned(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect::<Vec<_>>();
                break (
                    n,
                    req.method.unwrap_or("").to_owned(),
                    req.path.unwrap_or("").to_owned(),
                    headers,
                );
            }
            httparse::Status::Partial => {
                if read_more(stream, buf).await? == 0 {
                    return if buf.is_empty() {
                        Ok(None)
                    } else {
                        Err(invalid("closed inside a request head"))
                    };
                }
            }
        }
    };
    buf.drain(..head_len);
    let mut request = Request {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = request.header("content-length") {
        let len: usize = len.trim().parse().map_err(|_| invalid("content-length"))?;
        while buf.len() < len {
            if read_more(stream, buf).await? == 0 {
                return Err(invalid("closed inside a body"));
            }
        }
        request.body = buf.drain(..len).collect();
    } else if request
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"))
    {
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                if read_more(stream, buf).await? == 0 {
                    return Err(invalid("closed inside a chunk"));
                }
            };
            let size = std::str::from_utf8(&buf[..line_end])
                .ok()
                .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())
                .ok_or_else(|| invalid("chunk size"))?;
            buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                        buf.drain(..i + 2);
                        if i == 0 {
                            break;
                        }
                    } else if read_more(stream, buf).await? == 0 {
                        return Err(invalid("closed inside trailers"));
                    }
                }
                break;
            }
            while buf.len() < size + 2 {
                if read_more(stream, buf).await? == 0 {
                    return Err(invalid("closed inside a chunk"));
                }
            }
            request.body.extend(buf.drain(..size));
            buf.drain(..2);
        }
    }
    Ok(Some(request))
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 64 * 1024];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One raw HTTP/1.1 exchange on a kept-alive connection: the status
    /// line, the lower-cased headers and the body.
    async fn exchange(
        stream: &mut TcpStream,
        request: &str,
    ) -> (String, HashMap<String, String>, Vec<u8>) {
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        loop {
            let mut parsed = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut parsed);
            if let httparse::Status::Complete(n) = resp.parse(&buf).unwrap() {
                let status = format!("{} {}", resp.code.unwrap(), resp.reason.unwrap());
                let headers: HashMap<String, String> = resp
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let len: usize = headers["content-length"].parse().unwrap();
                while buf.len() < n + len {
                    read_more(stream, &mut buf).await.unwrap();
                }
                return (status, headers, buf[n..n + len].to_vec());
            }
            assert!(read_more(stream, &mut buf).await.unwrap() > 0, "closed");
        }
    }

    #[tokio::test]
    async fn serves_an_invocation_and_takes_its_response_and_errors() {
        let api = RuntimeApi::start().await.unwrap();
        let mut conn = TcpStream::connect(api.address()).await.unwrap();
        let before = SystemTime::now();
        let invoked = tokio::spawn({
            let api = Arc::new(api);
            let a = api.clone();
            async move {
                let first = a
                    .invoke(br#"{"n":1}"#.to_vec(), Duration::from_secs(60))
                    .await;
                let second = a.invoke(b"{}".to_vec(), Duration::from_secs(60)).await;
                (api, first, second)
            }
        });
        let next = "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nhost: x\r\n\r\n";
        let (status, headers, body) = exchange(&mut conn, next).await;
        assert_eq!(status, "200 OK");
        assert_eq!(body, br#"{"n":1}"#);
        assert_eq!(headers["lambda-runtime-invoked-function-arn"], FUNCTION_ARN);
        assert!(headers["lambda-runtime-trace-id"].starts_with("Root=1-"));
        let deadline: u128 = headers["lambda-runtime-deadline-ms"].parse().unwrap();
        let since = before.duration_since(UNIX_EPOCH).unwrap().as_millis();
        assert!((since + 59_000..=since + 61_000).contains(&deadline));
        let id = headers["lambda-runtime-aws-request-id"].clone();

        // The response, with a chunked body, on the same connection.
        let post = format!(
            "POST /2018-06-01/runtime/invocation/{id}/response HTTP/1.1\r\nhost: x\r\n\
             transfer-encoding: chunked\r\n\r\n3\r\n{{\"o\r\n5\r\nk\":1}}\r\n0\r\n\r\n"
        );
        let (status, _, _) = exchange(&mut conn, &post).await;
        assert_eq!(status, "202 Accepted");

        // The second invocation fails, by Content-Length.
        let (_, headers, _) = exchange(&mut conn, next).await;
        let id2 = headers["lambda-runtime-aws-request-id"].clone();
        assert_ne!(id, id2);
        let body = r#"{"errorType":"boom","errorMessage":"no"}"#;
        let post = format!(
            "POST /2018-06-01/runtime/invocation/{id2}/error HTTP/1.1\r\nhost: x\r\n\
             lambda-runtime-function-error-type: unhandled\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let (status, _, _) = exchange(&mut conn, &post).await;
        assert_eq!(status, "202 Accepted");

        let (api, first, second) = invoked.await.unwrap();
        assert_eq!(first.json(), serde_json::json!({"ok": 1}));
        assert_eq!(
            second,
            Outcome::Error {
                error_type: "unhandled".into(),
                body: body.as_bytes().to_vec(),
            }
        );
        assert!(api.first_next().await <= Instant::now());

        // An unknown id and an init error.
        let post = "POST /2018-06-01/runtime/invocation/nope/response HTTP/1.1\r\n\
                    host: x\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(exchange(&mut conn, post).await.0, "400 Unknown request id");
        assert_eq!(api.init_error(), None);
        let post = "POST /2018-06-01/runtime/init/error HTTP/1.1\r\nhost: x\r\n\
                    lambda-runtime-function-error-type: Runtime.InitError\r\n\
                    content-length: 2\r\n\r\n{}";
        assert_eq!(exchange(&mut conn, post).await.0, "202 Accepted");
        assert_eq!(
            api.init_error(),
            Some(Outcome::Error {
                error_type: "Runtime.InitError".into(),
                body: b"{}".to_vec(),
            })
        );
    }
}
