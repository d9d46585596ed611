//! The Lambda `bootstrap`s as processes, driven through a local Lambda
//! Runtime API (`worker_testkit::runtime_api`) the way Lambda drives them:
//!
//! 1. **Memory**: the stream `bootstrap` handles Lambda's largest batches
//!    against DynamoDB Local: (a) 10,000 small records in about 6 MB, (b)
//!    1,000 changes of 20-food containers. Its peak RSS (`VmHWM` of
//!    `/proc/<pid>/status`) after init and after each of two deliveries of
//!    the batch (the second: a retry, idempotent), one fresh process per
//!    batch. Goal: <= 64 MiB (a 128 MB function).
//! 2. **Cold start**: from `exec` of a `bootstrap` to its first
//!    `GET /runtime/invocation/next`, alternating the stream and schedule
//!    `bootstrap`s with the floor, a minimal `lambda_runtime` hello-world
//!    (`crates/testkit/examples/hello_lambda.rs`) of the same profile; the
//!    median of 20 runs each. Goal: <= 1.5x the floor.
//! 3. **Size** of the three binaries. Goal: <= 8 MB each `bootstrap`.
//!
//! All three are built first with the `bootstrap` profile: the release
//! settings (those of `scripts/package`) in `target/bootstrap/`, because
//! `cargo bench` itself builds the package's bins with the bench profile
//! and puts them in `target/release/`, over the release ones
//! (`worker_testkit::lambda_process`, which each app's `lambda_process`
//! benchmark uses too).
//!
//! Run: `cargo bench --bench lambda_process` (`-- --runs N` cold starts;
//! `-- --skip-memory`, `-- --skip-cold`).

#[path = "common/decide.rs"]
mod decide_event;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use worker_testkit::lambda_process::{self as process, MIB, PAYLOAD_LIMIT};
use worker_testkit::runtime_api::RuntimeApi;

/// Build the `bootstrap`s and the floor with the `bootstrap` profile.
fn build() -> PathBuf {
    process::build("nishiki-worker", &["stream", "schedule"], &[]);
    process::build("worker-testkit", &[], &["hello_lambda"])
}

fn stats(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[0], xs[xs.len() / 2], xs[xs.len() - 1])
}

async fn memory_case(stream: &Path, what: &str, payload: Vec<u8>, records: usize) -> f64 {
    let (_local, table) = worker_testkit::TestTable::on_own_local(
        "nishiki-table-lambda-db",
        &nishiki_worker::schema::nishiki(),
    )
    .await;
    let env = [
        ("TABLE_NAME", table.name.clone()),
        ("DYNAMODB_ENDPOINT_URL", table.endpoint.clone()),
    ];
    let peak = process::peak(stream, &env, &payload, 2).await;
    let failures: Vec<usize> = peak
        .deliveries
        .iter()
        .map(|d| {
            d.response["batchItemFailures"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .collect();
    println!(
        "memory {what}: {records} records, {:.2} MiB payload{}; batch item failures {failures:?}; {}",
        payload.len() as f64 / MIB,
        if payload.len() > PAYLOAD_LIMIT {
            " (over Lambda's 6 MiB)"
        } else {
            ""
        },
        peak.describe()
    );
    peak.mib()
}

/// Seconds from exec to the first `GET …/next`.
async fn cold_start(binary: &Path, env: &[(&str, String)]) -> f64 {
    let api = RuntimeApi::start().await.expect("runtime API");
    let started = Instant::now();
    let mut child = process::spawn(binary, &api, env);
    let first = tokio::time::timeout(Duration::from_secs(30), api.first_next())
        .await
        .unwrap_or_else(|_| panic!("{} never asked for an invocation", binary.display()));
    let _ = child.kill();
    let _ = child.wait();
    (first - started).as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(20usize);
    let dir = build();
    let stream = dir.join("stream");
    let schedule = dir.join("schedule");
    let hello = dir.join("examples").join("hello_lambda");

    let size = |p: &Path| std::fs::metadata(p).expect("built").len();
    println!(
        "size: stream {} bytes, schedule {} bytes, hello_lambda {} bytes (goal <= 8,000,000 each bootstrap)",
        size(&stream),
        size(&schedule),
        size(&hello)
    );

    if !args.iter().any(|a| a == "--skip-cold") {
        // No table is touched before the first GET /next; the name must
        // be there for the configuration to load.
        let env = [("TABLE_NAME", "nishiki-table-cold-db".to_owned())];
        let (mut s, mut c, mut h) = (vec![], vec![], vec![]);
        for _ in 0..runs {
            h.push(cold_start(&hello, &[]).await * 1e3);
            s.push(cold_start(&stream, &env).await * 1e3);
            c.push(cold_start(&schedule, &env).await * 1e3);
        }
        let (hl, hm, hh) = stats(h);
        let (sl, sm, sh) = stats(s);
        let (cl, cm, ch) = stats(c);
        println!(
            "cold start, exec to first GET /next, {runs} runs each (min / median / max ms): \
             hello_lambda {hl:.2} / {hm:.2} / {hh:.2}; stream {sl:.2} / {sm:.2} / {sh:.2}; \
             schedule {cl:.2} / {cm:.2} / {ch:.2}; median ratio stream {:.2}x, schedule {:.2}x (goal <= 1.5x)",
            sm / hm,
            cm / hm
        );
    }

    if !args.iter().any(|a| a == "--skip-memory") {
        let small = decide_event::small_records_event(10_000);
        let containers = decide_event::container_records_event(1_000);
        let a = memory_case(&stream, "(a) small", small, 10_000).await;
        let b = memory_case(&stream, "(b) 20-food containers", containers, 1_000).await;
        println!(
            "memory: peak VmHWM (a) {a:.1} MiB, (b) {b:.1} MiB (goal <= 64 MiB: {})",
            if a.max(b) <= 64.0 { "met" } else { "not met" }
        );
    }
}
