//! `stuck-orders` (hourly): orders that stayed in one of `STUCK_STATUSES`
//! for longer than `STUCK_AFTER_HOURS` are reported, and published as
//! `OrderStuck` events to `NOTIFY_EVENT_BUS` when it is set ([`rules`]).
//!
//! One `GSI1` range Query per status (`GSI1PK = ORDER#STATUS#<s> AND
//! GSI1SK < AT#<cutoff>`), so a run reads the stuck orders, not the table.
//! Read only: each tick reports every order stuck at that time (an order
//! stuck for days is announced at every tick until it moves; events are
//! at least once). A tick reads at least one page and continues while
//! [`JobRun::has_time`]; one cut short reports `complete: false` and the
//! next starts over (there is nothing to resume: it wrote nothing).

pub mod rules;

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use worker_engine::EventPublisher;
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::settings::JobSettings;
use worker_engine::store::{QuerySpec, Store};
use worker_engine::{Access, EnvVar, ReadBy, Schedule, ScheduleSpec};
use worker_engine::{ConfigError, Env};

use crate::app::{Deps, JobSpec};
use crate::keys::{self, Job};
use rules::StuckOrder;

/// Orders found stuck.
pub const ORDERS_STUCK: &str = "OrdersStuck";
/// `OrderStuck` events published.
pub const STUCK_EVENTS: &str = "OrderStuckEvents";
/// `OrderStuck` events the bus rejected or a failed call did not send.
pub const STUCK_EVENTS_FAILED: &str = "OrderStuckEventsFailed";

/// Comma-separated order statuses an order can be stuck in (default
/// `PENDING,PAID`).
pub const STUCK_STATUSES: &str = "STUCK_STATUSES";
/// Hours in one status after which an order is stuck (default 48).
pub const STUCK_AFTER_HOURS: &str = "STUCK_AFTER_HOURS";
/// The EventBridge bus of `OrderStuck` events (unset: none).
pub const NOTIFY_EVENT_BUS: &str = "NOTIFY_EVENT_BUS";

/// Orders per Query page.
pub const PAGE_SIZE: i32 = 100;
/// Stuck orders listed in a report, at most.
pub const MAX_LISTED: usize = 50;

const JOB_ENV: &[ReadBy<Job>] = &[ReadBy::Job(Job::StuckOrders)];

/// The `stuck-orders` job: its variables, schedule, access and metrics.
pub const SPEC: JobSpec = JobSpec {
    name: "stuck-orders",
    summary: "orders that stayed in one of STUCK_STATUSES longer than STUCK_AFTER_HOURS are reported and published as OrderStuck events",
    env: &[
        EnvVar {
            name: STUCK_STATUSES,
            read_by: JOB_ENV,
            default: Some("PENDING,PAID"),
            meaning: "comma-separated order statuses an order can be stuck in",
        },
        EnvVar {
            name: STUCK_AFTER_HOURS,
            read_by: JOB_ENV,
            default: Some("48"),
            meaning: "an order unchanged this many hours in one of them is stuck",
        },
        EnvVar {
            name: NOTIFY_EVENT_BUS,
            read_by: JOB_ENV,
            default: None,
            meaning: "EventBridge bus of OrderStuck events (unset: reported only)",
        },
    ],
    stream: None,
    scheduled: &[ScheduleSpec {
        job: Job::StuckOrders,
        function: "StuckOrdersFunction",
        schedule: Schedule::Rate("rate(1 hour)"),
        local_cron: "0 * * * *",
        access: Access {
            dynamodb_actions: &["dynamodb:Query"],
            indexes: &[keys::GSI1],
            fallbacks: &[],
            publishes_events: true,
        },
        metrics: &[ORDERS_STUCK, STUCK_EVENTS, STUCK_EVENTS_FAILED],
    }],
    handlers: |_| Vec::new(),
    jobs: |d| vec![Arc::new(StuckOrders::new(d))],
};

/// The settings of `stuck-orders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckSettings {
    /// `STUCK_STATUSES`: the statuses read (each a `GSI1` partition), none
    /// empty or holding `#`.
    pub statuses: Vec<String>,
    /// `STUCK_AFTER_HOURS`: an order not updated for this many hours is stuck.
    pub after_hours: u64,
    /// `NOTIFY_EVENT_BUS`: where `OrderStuck` events go (`None`: not
    /// published).
    pub event_bus: Option<String>,
}

impl Default for StuckSettings {
    fn default() -> Self {
        StuckSettings {
            statuses: vec!["PENDING".into(), "PAID".into()],
            after_hours: 48,
            event_bus: None,
        }
    }
}

impl JobSettings for StuckSettings {
    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = StuckSettings::default();
        let statuses = env.parse(STUCK_STATUSES, |v| {
            let list: Vec<String> = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if list.is_empty() || list.iter().any(|s| keys::check_status(s).is_err()) {
                return Err("expected comma-separated statuses without #".into());
            }
            Ok(list)
        })?;
        Ok(StuckSettings {
            statuses: statuses.unwrap_or(d.statuses),
            after_hours: env.number(STUCK_AFTER_HOURS)?.unwrap_or(d.after_hours),
            event_bus: env.non_empty(NOTIFY_EVENT_BUS),
        })
    }
}

/// The `stuck-orders` job: see the module's doc.
pub struct StuckOrders {
    store: Arc<dyn Store>,
    settings: StuckSettings,
    publisher: Arc<dyn EventPublisher>,
}

impl StuckOrders {
    /// The job over the table, `stuck-orders` settings and publisher of `deps`.
    pub fn new(deps: &Deps) -> Self {
        StuckOrders {
            store: deps.store.clone(),
            settings: deps.settings.own.clone(),
            publisher: deps.publisher.clone(),
        }
    }
}

#[async_trait]
impl ScheduledJob<Job> for StuckOrders {
    fn job(&self) -> Job {
        Job::StuckOrders
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let cutoff = rules::cutoff(run.now, self.settings.after_hours);
        let bound = rules::cutoff_key(cutoff).map_err(|e| HandlerError::invalid(e.to_string()))?;
        let (mut stuck, mut published, mut failed, mut malformed) = (0u64, 0u64, 0u64, 0u64);
        let mut listed: Vec<StuckOrder> = Vec::new();
        let mut by_status = serde_json::Map::new();
        let mut complete = true;
        'statuses: for status in &self.settings.statuses {
            let partition = (
                keys::GSI1PK,
                AttributeValue::S(keys::status_partition(status)),
            );
            let upper = AttributeValue::S(bound.clone());
            let mut spec = QuerySpec::below(partition, keys::GSI1SK, upper).on_index(keys::GSI1);
            spec.limit = Some(PAGE_SIZE);
            let mut start = None;
            let mut n = 0u64;
            loop {
                let page = self.store.query_page(&spec, start).await?;
                let mut orders = Vec::new();
                for item in &page.items {
                    match StuckOrder::from_index_item(item) {
                        Ok(o) => orders.push(o),
                        Err(e) => {
                            malformed += 1;
                            tracing::warn!(error = %e, "stuck-orders: index item skipped");
                        }
                    }
                }
                n += orders.len() as u64;
                for o in &orders {
                    tracing::info!(order_id = %o.order_id, user_id = %o.user_id, status = %o.status, updated_at = o.updated_at, "order stuck");
                }
                if let Some(bus) = &self.settings.event_bus
                    && !orders.is_empty()
                {
                    let entries: Vec<_> = orders.iter().map(|o| o.event(bus, run.now)).collect();
                    match self.publisher.publish(&entries).await {
                        Ok(r) => {
                            published += r.sent as u64;
                            failed += r.rejected.len() as u64;
                        }
                        Err(e) => {
                            failed += entries.len() as u64;
                            tracing::error!(error = %e, "stuck-orders: publishing failed");
                        }
                    }
                }
                listed.extend(
                    orders
                        .into_iter()
                        .take(MAX_LISTED.saturating_sub(listed.len())),
                );
                start = page.last_evaluated_key;
                if start.is_none() {
                    break;
                }
                if !run.has_time() {
                    complete = false;
                    stuck += n;
                    by_status.insert(status.clone(), json!(n));
                    break 'statuses;
                }
            }
            stuck += n;
            by_status.insert(status.clone(), json!(n));
        }
        Ok(JobReport {
            job: Job::StuckOrders,
            complete,
            summary: format!(
                "{stuck} order(s) stuck over {}h, {published} event(s) published{}",
                self.settings.after_hours,
                if complete { "" } else { "; cut short" }
            ),
            details: json!({
                "cutoff": cutoff,
                "stuck": stuck,
                "by_status": by_status,
                "published": published,
                "failed": failed,
                "malformed": malformed,
                "bus": self.settings.event_bus.is_some(),
                "listed": listed,
            }),
            metrics: vec![
                Metric::count(ORDERS_STUCK, stuck),
                Metric::count(STUCK_EVENTS, published),
                Metric::count(STUCK_EVENTS_FAILED, failed),
            ],
        })
    }
}
