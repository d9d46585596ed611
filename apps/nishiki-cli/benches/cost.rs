//! Cost per million stream records of the archive's, the chat's and the
//! shop's `StreamFunction` (`cargo bench -p nishiki-cli --bench cost`,
//! `-- --app shop` for one of them; Nishiki's is the root package's
//! `cargo bench -p nishiki-worker --bench cost`, and `cargo bench --bench
//! cost` runs both): each app's mix of its service's writes
//! (its module says which) drained through its worker on a DynamoDB Local
//! of its own, metered and priced by `worker_testkit::cost`. One binary
//! for the three apps: this package is the one that sees them all (its
//! documents' tests run every app's command line).
//!
//! Options: `--app archive|chat|shop` (default: all three, one after the
//! other), `--seed S` (default 7), `--writes N` (default 5,000 service
//! writes), and per app `--files N` (archive), `--users N` (chat).

#[path = "cost/archive.rs"]
mod archive;
#[path = "cost/chat.rs"]
mod chat;
#[path = "cost/shop.rs"]
mod shop;

/// The apps `--app` names, else all three.
fn apps() -> Vec<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--app" {
            return vec![args.next().expect("--app: archive, chat or shop")];
        }
    }
    ["archive", "chat", "shop"].map(String::from).to_vec()
}

// A current-thread runtime, as the Lambda bootstraps run: the thread's CPU
// time is the worker's (its handlers, the SDK's client, its connections).
#[tokio::main(flavor = "current_thread")]
async fn main() {
    for app in apps() {
        let costed = match app.as_str() {
            "archive" => archive::run().await,
            "chat" => chat::run().await,
            "shop" => shop::run().await,
            other => panic!("--app {other}: archive, chat or shop"),
        };
        worker_testkit::cost::print(&costed);
    }
}
