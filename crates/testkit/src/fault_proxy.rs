//! A loopback HTTP/1.1 proxy in front of DynamoDB Local that injects faults.
//!
//! Every request the proxy does not fault is forwarded, byte for byte, to
//! the real DynamoDB Local (no fake of DynamoDB anywhere): the proxy reads
//! the request head and its `Content-Length` body, forwards them on an
//! upstream keep-alive connection of its own, reads the response head and
//! body (`Content-Length`, chunked, or up to EOF) and returns it. Client
//! connections are keep-alive too: many requests per connection.
//!
//! Per request a seeded [`StdRng`] decides, at the configured rate, one
//! [`FaultKind`]:
//!
//! - `Throttle`: HTTP 400 `ThrottlingException`, nothing forwarded;
//! - `ThroughputExceeded`: HTTP 400 `ProvisionedThroughputExceededException`;
//! - `InternalError`: HTTP 500 `InternalServerError`;
//! - `DropBeforeForward`: the connection is closed, nothing forwarded;
//! - `DropAfterForward`: the request is forwarded and applied, then the
//!   connection is closed before the response reaches the client (the write
//!   happened, the caller does not know: the hard case for idempotency);
//! - `Latency`: the request is forwarded after an added delay;
//! - `AccessDenied`: HTTP 400 `AccessDeniedException`, as DynamoDB answers
//!   a role whose policy lacks the action (an environment fault, not a
//!   transient one: never drawn by [`FaultPlan::random`]).
//!
//! [`FaultProxy::stats`] counts requests and each fault kind.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// HTTP 400 `ThrottlingException`; nothing forwarded.
    Throttle,
    /// HTTP 400 `ProvisionedThroughputExceededException`; nothing
    /// forwarded.
    ThroughputExceeded,
    /// HTTP 500 `InternalServerError`; nothing forwarded.
    InternalError,
    /// The client's connection is closed before anything is forwarded.
    DropBeforeForward,
    /// The request is forwarded and applied, then the connection is closed
    /// before the response reaches the client.
    DropAfterForward,
    /// The request is forwarded after a delay drawn from
    /// [`FaultConfig::latency_ms`]; the client sees it succeed.
    Latency,
    /// HTTP 400 `AccessDeniedException`, as for a role whose policy lacks
    /// the action: an environment fault, not in [`FaultKind::ALL`].
    AccessDenied,
}

impl FaultKind {
    /// The transient kinds, which [`FaultPlan::random`] draws from: all
    /// but [`FaultKind::AccessDenied`].
    pub const ALL: [FaultKind; 6] = [
        FaultKind::Throttle,
        FaultKind::ThroughputExceeded,
        FaultKind::InternalError,
        FaultKind::DropBeforeForward,
        FaultKind::DropAfterForward,
        FaultKind::Latency,
    ];

    /// Whether the client sees the request fail (everything but latency).
    pub fn fails(self) -> bool {
        self != FaultKind::Latency
    }
}

/// Which requests get which fault.
#[derive(Debug, Clone)]
pub enum FaultPlan {
    /// Forward everything.
    None,
    /// Each request fails with probability `rate`, the kind drawn uniformly
    /// from `kinds`.
    Random {
        /// Probability of a fault per request, 0.0 to 1.0 (clamped).
        rate: f64,
        /// The kinds drawn from; empty means no fault.
        kinds: Vec<FaultKind>,
    },
    /// The first `n` requests (from now) get `kind`, then none.
    FirstN {
        /// How many requests are faulted.
        n: u64,
        /// The fault each of them gets.
        kind: FaultKind,
    },
    /// Every request (from now) gets `kind`.
    Always(FaultKind),
}

impl FaultPlan {
    /// `rate` of the requests fail, every kind equally likely.
    pub fn random(rate: f64) -> Self {
        FaultPlan::Random {
            rate,
            kinds: FaultKind::ALL.to_vec(),
        }
    }
}

/// How the proxy behaves.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// Which requests get which fault, from the first request on
    /// ([`FaultProxy::set_plan`] changes it later).
    pub plan: FaultPlan,
    /// Seed of the proxy's [`StdRng`]: the same seed and requests in the
    /// same order draw the same faults and delays.
    pub seed: u64,
    /// Delay range of [`FaultKind::Latency`], in milliseconds (inclusive).
    pub latency_ms: (u64, u64),
}

impl FaultConfig {
    /// No faults: the proxy only forwards and counts.
    pub fn none() -> Self {
        FaultConfig {
            plan: FaultPlan::None,
            seed: 0,
            latency_ms: (20, 120),
        }
    }

    /// [`FaultPlan::random`] at `rate` with the RNG seeded by `seed`,
    /// latency faults of 20 to 120 ms.
    pub fn random(seed: u64, rate: f64) -> Self {
        FaultConfig {
            plan: FaultPlan::random(rate),
            seed,
            latency_ms: (20, 120),
        }
    }
}

/// What the proxy saw and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests received from clients.
    pub requests: u64,
    /// Requests forwarded to DynamoDB Local (including delayed and
    /// drop-after-forward ones).
    pub forwarded: u64,
    /// Injected faults by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Times a stale upstream keep-alive connection was replaced before
    /// anything was sent on it successfully.
    pub upstream_reconnects: u64,
    /// Requests received, by DynamoDB operation (`X-Amz-Target`: `Scan`,
    /// `PutItem`, ...).
    pub operations: BTreeMap<String, u64>,
    /// Requests whose body names an index (`"IndexName"`: a Query or Scan
    /// of a secondary index).
    pub index_requests: u64,
}

impl FaultStats {
    /// Faults of `kind` injected (0 if none).
    pub fn count(&self, kind: FaultKind) -> u64 {
        self.faults.get(&kind).copied().unwrap_or(0)
    }
    /// Faults the client saw as failures (everything but latency).
    pub fn failures(&self) -> u64 {
        self.faults
            .iter()
            .filter(|(k, _)| k.fails())
            .map(|(_, n)| n)
            .sum()
    }
    /// Requests of one operation (`Scan`, `DeleteItem`, ...).
    pub fn operation(&self, name: &str) -> u64 {
        self.operations.get(name).copied().unwrap_or(0)
    }
    /// Add `other`'s counts to these (the stats of several proxies, or
    /// of several runs, summed).
    pub fn add(&mut self, other: &FaultStats) {
        for (k, n) in &other.operations {
            *self.operations.entry(k.clone()).or_default() += n;
        }
        self.requests += other.requests;
        self.index_requests += other.index_requests;
        self.forwarded += other.forwarded;
        self.upstream_reconnects += other.upstream_reconnects;
        for (k, n) in &other.faults {
            *self.faults.entry(*k).or_default() += n;
        }
    }
}

struct State {
    plan: FaultPlan,
    /// Requests left for [`FaultPlan::FirstN`].
    first_left: u64,
    rng: StdRng,
    latency_ms: (u64, u64),
    stats: FaultStats,
}

impl State {
    /// Decide the fate of the next request (and count it).
    fn decide(&mut self, request: &Message) -> (Option<FaultKind>, Duration) {
        let operation = request.operation.as_deref();
        self.stats.requests += 1;
        if request.names_index {
            self.stats.index_requests += 1;
        }
        if let Some(op) = operation {
            *self.stats.operations.entry(op.to_owned()).or_default() += 1;
        }
        let kind = match &self.plan {
            FaultPlan::None => None,
            FaultPlan::Random { rate, kinds } => {
                if !kinds.is_empty() && self.rng.random_bool(rate.clamp(0.0, 1.0)) {
                    Some(kinds[self.rng.random_range(0..kinds.len())])
                } else {
                    None
                }
            }
            FaultPlan::Always(kind) => Some(*kind),
            FaultPlan::FirstN { kind, .. } => {
                if self.first_left > 0 {
                    self.first_left -= 1;
                    Some(*kind)
                } else {
                    None
                }
            }
        };
        if let Some(k) = kind {
            *self.stats.faults.entry(k).or_default() += 1;
        }
        let delay = if kind == Some(FaultKind::Latency) {
            let (lo, hi) = self.latency_ms;
            Duration::from_millis(self.rng.random_range(lo..=hi.max(lo)))
        } else {
            Duration::ZERO
        };
        (kind, delay)
    }
}

struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    tasks: Mutex<Vec<AbortHandle>>,
}

/// The running proxy; stops (and drops its connections) when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listen on `127.0.0.1:0` and forward to `upstream_url`
    /// (`http://127.0.0.1:PORT`, DynamoDB Local's endpoint).
    pub async fn start(upstream_url: &str, config: FaultConfig) -> io::Result<FaultProxy> {
        FaultProxy::start_on("127.0.0.1:0", upstream_url, config).await
    }

    /// Listen on `bind` (e.g. this machine's own non-loopback address, for a
    /// client that must see a remote endpoint) and forward to
    /// `upstream_url`.
    pub async fn start_on(
        bind: &str,
        upstream_url: &str,
        config: FaultConfig,
    ) -> io::Result<FaultProxy> {
        let hostport = upstream_url
            .strip_prefix("http://")
            .unwrap_or(upstream_url)
            .trim_end_matches('/');
        let upstream = tokio::net::lookup_host(hostport)
            .await?
            .next()
            .ok_or_else(|| io::Error::other(format!("cannot resolve {hostport}")))?;
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let first_left = match config.plan {
            FaultPlan::FirstN { n, .. } => n,
            _ => 0,
        };
        let shared = Arc::new(Shared {
            upstream,
            state: Mutex::new(State {
                plan: config.plan,
                first_left,
                rng: StdRng::seed_from_u64(config.seed),
                latency_ms: config.latency_ms,
                stats: FaultStats::default(),
            }),
            tasks: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                let conn_shared = accept_shared.clone();
                let task = tokio::spawn(async move {
                    let _ = serve(client, &conn_shared).await;
                });
                let mut tasks = accept_shared.tasks.lock().expect("tasks lock");
                tasks.retain(|t| !t.is_finished());
                tasks.push(task.abort_handle());
            }
        });
        shared
            .tasks
            .lock()
            .expect("tasks lock")
            .push(accept.abort_handle());
        Ok(FaultProxy { addr, shared })
    }

    /// The endpoint URL to give the client under test.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the proxy saw and did since it started (a copy).
    pub fn stats(&self) -> FaultStats {
        self.shared.state.lock().expect("state lock").stats.clone()
    }

    /// Change the plan from the next request on.
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut s = self.shared.state.lock().expect("state lock");
        s.first_left = match plan {
            FaultPlan::FirstN { n, .. } => n,
            _ => 0,
        };
        s.plan = plan;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for t in self.shared.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}

/// A byte stream with a read buffer, for parsing HTTP/1.1 messages.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// One HTTP/1.1 message as raw bytes (head and body, unchanged).
struct Message {
    raw: Vec<u8>,
    /// The DynamoDB operation of a request (`X-Amz-Target`'s last part).
    operation: Option<String>,
    /// A request whose body names an index (`"IndexName"`).
    names_index: bool,
    /// The sender asked to close the connection after this message.
    close: bool,
}

impl Conn {
    fn new(stream: TcpStream) -> Self {
        Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Read more bytes into the buffer; `Ok(0)` on EOF.
    async fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Take bytes up to and including the first CRLF (a line), reading as
    /// needed.
    async fn line(&mut self, out: &mut Vec<u8>) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                out.extend_from_slice(&line);
                return Ok(line);
            }
            if self.fill().await? == 0 {
                return Err(unexpected_eof());
            }
        }
    }

    /// Move exactly `n` bytes into `out`, reading as needed.
    async fn exact(&mut self, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
        while self.buf.len() < n {
            if self.fill().await? == 0 {
                return Err(unexpected_eof());
            }
        }
        out.extend(self.buf.drain(..n));
        Ok(())
    }

    /// Read one message. `Ok(None)` on a clean EOF before any byte of it.
    /// `is_response` selects the body rules (a response without a length
    /// runs to EOF; a request without one has no body).
    async fn message(&mut self, is_response: bool) -> io::Result<Option<Message>> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill().await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(unexpected_eof())
                };
            }
        };
        let mut raw: Vec<u8> = self.buf.drain(..end).collect();
        let head = String::from_utf8_lossy(&raw).into_owned();
        let mut lines = head.split("\r\n");
        let start = lines.next().unwrap_or("");
        let mut content_length: Option<usize> = None;
        let mut chunked = false;
        let mut close = start.ends_with("HTTP/1.0");
        let mut operation = None;
        for l in lines {
            let Some((name, value)) = l.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => {
                    content_length = Some(value.parse().map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidData, "bad Content-Length")
                    })?)
                }
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                "x-amz-target" => {
                    operation = value.rsplit('.').next().map(str::to_owned);
                }
                _ => {}
            }
        }
        let status: Option<u16> = if is_response {
            start.split(' ').nth(1).and_then(|s| s.parse().ok())
        } else {
            None
        };
        let bodyless = status.is_some_and(|s| s == 204 || s == 304 || (100..200).contains(&s));
        if bodyless {
        } else if chunked {
            loop {
                let size_line = self.line(&mut raw).await?;
                let size_text = String::from_utf8_lossy(&size_line);
                let size_hex = size_text.trim().split(';').next().unwrap_or("");
                let size = usize::from_str_radix(size_hex, 16)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
                if size == 0 {
                    // Trailers, up to an empty line.
                    while self.line(&mut raw).await?.len() > 2 {}
                    break;
                }
                self.exact(size + 2, &mut raw).await?;
            }
        } else if let Some(n) = content_length {
            self.exact(n, &mut raw).await?;
        } else if is_response {
            while self.fill().await? > 0 {}
            raw.append(&mut self.buf);
            close = true;
        }
        let names_index = !is_response && find(&raw[end..], b"\"IndexName\"").is_some();
        Ok(Some(Message {
            raw,
            operation,
            names_index,
            close,
        }))
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn unexpected_eof() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed mid-message",
    )
}

/// A DynamoDB JSON-protocol error response.
fn error_response(status: &str, error_type: &str, message: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"{message}"}}"#
    );
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-ErrorType: {error_type}\r\nx-amzn-RequestId: injected-fault\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serve one client connection until it closes (or a fault closes it).
async fn serve(client: TcpStream, shared: &Shared) -> io::Result<()> {
    let mut client = Conn::new(client);
    let mut upstream: Option<Conn> = None;
    loop {
        let Some(request) = client.message(false).await? else {
            return Ok(());
        };
        let (fault, delay) = shared.state.lock().expect("state lock").decide(&request);
        let canned = match fault {
            Some(FaultKind::Throttle) => Some(error_response(
                "400 Bad Request",
                "ThrottlingException",
                "Rate of requests exceeds the allowed throughput.",
            )),
            Some(FaultKind::ThroughputExceeded) => Some(error_response(
                "400 Bad Request",
                "ProvisionedThroughputExceededException",
                "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
            )),
            Some(FaultKind::InternalError) => Some(error_response(
                "500 Internal Server Error",
                "InternalServerError",
                "Internal server error",
            )),
            Some(FaultKind::AccessDenied) => Some(error_response(
                "400 Bad Request",
                "AccessDeniedException",
                &format!(
                    "User: arn:aws:sts::123456789012:assumed-role/worker-role/worker is not authorized to perform: dynamodb:{} on resource: arn:aws:dynamodb:us-east-1:123456789012:table/* because no identity-based policy allows the dynamodb:{} action",
                    request.operation.as_deref().unwrap_or("?"),
                    request.operation.as_deref().unwrap_or("?"),
                ),
            )),
            Some(FaultKind::DropBeforeForward) => return Ok(()),
            _ => None,
        };
        if let Some(bytes) = canned {
            client.stream.write_all(&bytes).await?;
            if request.close {
                return Ok(());
            }
            continue;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let response = forward(shared, &mut upstream, &request).await?;
        shared.state.lock().expect("state lock").stats.forwarded += 1;
        if response.close {
            upstream = None;
        }
        if fault == Some(FaultKind::DropAfterForward) {
            // Applied upstream; the client never hears about it.
            return Ok(());
        }
        client.stream.write_all(&response.raw).await?;
        if request.close || response.close {
            return Ok(());
        }
    }
}

/// Send a request upstream and read its response. A reused keep-alive
/// connection that turns out closed before any response byte (DynamoDB
/// Local's idle timeout) is replaced once, like an HTTP client's pool does.
async fn forward(
    shared: &Shared,
    upstream: &mut Option<Conn>,
    request: &Message,
) -> io::Result<Message> {
    for attempt in 0..2 {
        let reused = upstream.is_some();
        if upstream.is_none() {
            let s = TcpStream::connect(shared.upstream).await?;
            let _ = s.set_nodelay(true);
            *upstream = Some(Conn::new(s));
        }
        let conn = upstream.as_mut().expect("connected");
        let sent = conn.stream.write_all(&request.raw).await;
        let received = match sent {
            Ok(()) => conn.message(true).await,
            Err(e) => Err(e),
        };
        match received {
            Ok(Some(m)) => return Ok(m),
            Ok(None) | Err(_) if reused && attempt == 0 && conn.buf.is_empty() => {
                *upstream = None;
                shared
                    .state
                    .lock()
                    .expect("state lock")
                    .stats
                    .upstream_reconnects += 1;
            }
            Ok(None) => {
                *upstream = None;
                return Err(unexpected_eof());
            }
            Err(e) => {
                *upstream = None;
                return Err(e);
            }
        }
    }
    Err(unexpected_eof())
}

/// A DynamoDB client for the worker under test, pointed at the proxy (same
/// region and dummy credentials as `store::local_client`), with the SDK's
/// own retries kept small (`max_attempts`, 5 ms initial backoff) so injected
/// faults reach the worker's batch engine, and short timeouts so dropped
/// connections fail fast.
pub fn client_via(proxy: &FaultProxy, max_attempts: u32) -> aws_sdk_dynamodb::Client {
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local",
            "local",
            None,
            None,
            "worker-local",
        ))
        .endpoint_url(proxy.endpoint_url())
        .http_client(worker_engine::aws::https_client())
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(max_attempts)
                .with_initial_backoff(Duration::from_millis(5))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(Duration::from_secs(5))
                .operation_timeout(Duration::from_secs(12))
                .build(),
        )
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
