//! The on-failure queue (SQS), read with the AWS SDK: every message,
//! hidden while the command works on them, then deleted (replayed) or made
//! visible again (a dry run, or a message left in the queue).

use aws_smithy_types::error::display::DisplayErrorContext;
use serde_json::Value;

use super::endpoints::{self, Resolved};
use crate::cli::CliError;
use crate::cli::target::AwsOpts;
use crate::failure_message::{self, FailureRange};

/// How long a received message stays hidden from other consumers while the
/// command works (seconds): the listing, then every range's replay. Every
/// message not deleted is made visible again at the end; if the command is
/// killed, they reappear after this long.
pub const VISIBILITY_TIMEOUT: i32 = 900;
/// ReceiveMessage's largest page.
const PAGE: i32 = 10;
/// Long polling (seconds) of each receive: it asks every server of the
/// queue, so an empty answer means the queue has no visible message left
/// (short polling samples a subset and may answer empty too early).
const WAIT: i32 = 1;

/// One message of the queue.
#[derive(Debug, Clone)]
pub(super) struct Message {
    pub id: String,
    pub receipt: String,
    /// Its range, or why it is not an on-failure message.
    pub range: Result<FailureRange, String>,
}

pub(super) struct Queue {
    client: aws_sdk_sqs::Client,
    pub url: String,
    /// Where the client goes (for the report).
    pub endpoint: String,
}

fn sdk_error(what: String, e: impl std::error::Error) -> CliError {
    CliError::Usage(format!("{what}: {}", DisplayErrorContext(e)))
}

impl Queue {
    /// The queue at `url`, its client made as [`endpoints`] says.
    pub(super) async fn new(url: String, flag: Option<&str>, aws: &AwsOpts) -> Self {
        let resolved: Resolved =
            endpoints::resolve_sqs(flag, &url, |name| std::env::var(name).ok());
        let (client, region) = endpoints::sqs_client(&resolved, aws, &url).await;
        Queue {
            client,
            endpoint: resolved.describe(region.as_deref()),
            url,
        }
    }

    /// Every message of the queue, each hidden for [`VISIBILITY_TIMEOUT`]:
    /// ReceiveMessage (10 at a time) until a receive comes back empty. A
    /// message received twice (its visibility ran out) is listed once,
    /// with its latest receipt handle.
    pub(super) async fn receive_all(&self) -> Result<Vec<Message>, CliError> {
        let mut out: Vec<Message> = Vec::new();
        loop {
            let page = self
                .client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(PAGE)
                .visibility_timeout(VISIBILITY_TIMEOUT)
                .wait_time_seconds(WAIT)
                .send()
                .await
                .map_err(|e| sdk_error(format!("cannot read {}", self.url), e))?;
            let messages = page.messages.unwrap_or_default();
            if messages.is_empty() {
                return Ok(out);
            }
            for m in messages {
                let id = m.message_id.unwrap_or_default();
                let receipt = m.receipt_handle.unwrap_or_default();
                if let Some(seen) = out.iter_mut().find(|s| s.id == id) {
                    seen.receipt = receipt;
                    continue;
                }
                let range = serde_json::from_str::<Value>(m.body.as_deref().unwrap_or(""))
                    .map_err(|e| format!("not JSON: {e}"))
                    .and_then(|body| failure_message::parse(&body).map_err(|e| e.to_string()));
                out.push(Message { id, receipt, range });
            }
        }
    }

    /// Delete a message (its range is replayed).
    pub(super) async fn delete(&self, message: &Message) -> Result<(), CliError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(&message.receipt)
            .send()
            .await
            .map_err(|e| {
                sdk_error(
                    format!("cannot delete message {} of {}", message.id, self.url),
                    e,
                )
            })?;
        Ok(())
    }

    /// Make messages visible again at once (ChangeMessageVisibility 0, ten
    /// at a time): the queue as it was. Returns how many were.
    pub(super) async fn release(&self, messages: &[&Message]) -> Result<usize, CliError> {
        use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry as Entry;
        let mut released = 0;
        for chunk in messages.chunks(PAGE as usize) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    Entry::builder()
                        .id(i.to_string())
                        .receipt_handle(&m.receipt)
                        .visibility_timeout(0)
                        .build()
                        .expect("id and receipt handle are set")
                })
                .collect::<Vec<_>>();
            let out = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    sdk_error(
                        format!("cannot make the messages of {} visible again", self.url),
                        e,
                    )
                })?;
            released += out.successful.len();
            if let Some(failed) = out.failed.first() {
                return Err(CliError::Usage(format!(
                    "cannot make message {} of {} visible again: {} ({}); it reappears within {VISIBILITY_TIMEOUT} s",
                    chunk
                        .get(failed.id.parse::<usize>().unwrap_or(usize::MAX))
                        .map_or("?", |m| m.id.as_str()),
                    self.url,
                    failed.message.as_deref().unwrap_or(""),
                    failed.code
                )));
            }
        }
        Ok(released)
    }
}
