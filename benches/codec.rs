//! CPU paths of the core, with criterion: key encoding/decoding, typed item
//! decoding/encoding, decoding a 100-record Lambda stream event, and the
//! stream handler's whole CPU path for a realistic 1,000-record event
//! (group `decide`, see [`decide`]; each app's path beside it) next to the
//! parsing floor.
//! Run: `cargo bench --bench codec` (only the last: `cargo bench --bench
//! codec -- decide`; at both profiles, side by side: `scripts/bench-cpu`).

#[path = "common/apps.rs"]
mod apps;
#[path = "common/decide.rs"]
mod decide_event;
#[path = "common/typed_floor.rs"]
mod typed_floor;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use nishiki_worker::items::{Container, Entity, Food, Item};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, UserId};
use worker_engine::stream::{ChangeKind, StreamChange, decode_event, encode_event};

fn container(foods: usize) -> Item {
    let created = "2024-03-22T22:03:33.123Z".parse().unwrap();
    Entity::Container(Container {
        id: ContainerId::random(),
        container_name: "Fridge".into(),
        foods: (0..foods)
            .map(|i| Food {
                food_id: FoodId::random(),
                name: format!("Food {i}"),
                unit: (i % 2 == 0).then(|| "g".to_owned()),
                quantity: (i % 3 != 0).then_some(i as f64),
                category: Some("vegetables".into()),
                expiry: (i % 4 != 0).then_some(created),
                created_at: created,
            })
            .collect(),
        extra: Item::new(),
    })
    .to_item()
}

fn keys(c: &mut Criterion) {
    let membership = ItemKey::Membership {
        user: UserId::random(),
        group: GroupId::random(),
    };
    let (pk, sk) = membership.encode();
    let mut g = c.benchmark_group("keys");
    g.bench_function("encode membership", |b| {
        b.iter(|| black_box(&membership).encode())
    });
    g.bench_function("decode membership", |b| {
        b.iter(|| ItemKey::decode(black_box(&pk), black_box(&sk)).unwrap())
    });
    g.finish();
}

fn items(c: &mut Criterion) {
    let raw = container(20);
    let entity = Entity::from_item(raw.clone()).unwrap();
    let mut g = c.benchmark_group("items");
    g.bench_function("decode container (20 foods)", |b| {
        b.iter(|| Entity::from_item(black_box(raw.clone())).unwrap())
    });
    g.bench_function("encode container (20 foods)", |b| {
        b.iter(|| black_box(&entity).to_item())
    });
    g.finish();
}

fn stream(c: &mut Criterion) {
    let changes: Vec<StreamChange> = (0..100u64)
        .map(|i| {
            let item = container(5);
            StreamChange {
                event_id: format!("event-{i}"),
                kind: ChangeKind::Modify,
                sequence_number: Some(format!("{:021}", 1000 + i).parse().unwrap()),
                approximate_creation: None,
                keys: ItemKey::from_attributes(&item).unwrap().to_attributes(),
                old_image: Some(item.clone()),
                new_image: Some(item),
                event_source_arn: None,
                size_bytes: Some(1000),
                typed: None,
            }
        })
        .collect();
    let event = encode_event(
        &changes,
        Some("arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x"),
    );
    let bytes = serde_json::to_vec(&event).unwrap();
    let mut g = c.benchmark_group("stream");
    g.throughput(Throughput::Elements(100));
    g.bench_function("decode 100-record event", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(black_box(&bytes)).unwrap();
            decode_event(&v).unwrap()
        })
    });
    g.finish();
}

/// The stream handler's CPU path for a realistic 1,000-record event, and the
/// parsing floor on the same bytes:
///
/// - `floor_serde_json_value`: `serde_json::from_slice::<Value>`
///   ([`floor_value`]);
/// - `floor_ignored_any`: `serde_json::from_slice::<IgnoredAny>`
///   ([`floor_ignored_any`]), the
///   validation floor: every byte read, nothing kept;
/// - `decode_route_decide`: the Lambda event bytes decoded into stream
///   changes as the stream function decodes them (each image typed as the
///   event is read, by Nishiki's [`nishiki_worker::worker::Reader`]), each
///   routed like [`nishiki_worker::worker::Router`] does (typed key and
///   images, loop guard, the handlers that want the item kind) and decided
///   by each job's pure rule (relationships: the cascade; expiry: the food
///   plans and the flag/reminder writes; invitations: the TTL stamp);
/// - `items_route_decide`: the same, each image built into an item first
///   and typed from it: the path of an event the reader does not take;
/// - `app_archive`, `app_chat`, `app_shop`: each app's path over a
///   1,000-record event of its own table ([`apps`]), beside the two floors
///   on that event's bytes (`app_<name>_floor_...`), the same path
///   through items (`app_<name>_items`) and the typed floor
///   (`app_<name>_floor_typed`, [`typed_floor`]: the least a typed
///   serde_json reader does with the event);
/// - `decode_route_decide_paired` and `app_<name>_paired`: the path, the
///   same through items, the `Value` floor and (for an app) the typed
///   floor timed one right after the other, pass after pass (see
///   [`paired`]).
///
/// After the run, each path's ratios to both floors are printed from
/// criterion's estimates, then the paired ratios ([`print_pairs`]).
fn decide(c: &mut Criterion) {
    let fixture = decide_event::Fixture::new(1000);
    let bytes = fixture.bytes();
    // The decision is real: check it once before timing it.
    let summary = fixture.decide(&bytes);
    fixture.check(&summary);
    eprintln!(
        "decide: {} records, {} bytes; {summary:?}",
        fixture.records(),
        bytes.len()
    );
    let apps = apps::cases();
    for app in &apps {
        app.check();
        eprintln!("decide: {}, {} bytes", app.name, app.bytes.len());
    }
    print_allocations(&fixture, &bytes, &apps);
    let mut g = c.benchmark_group("decide");
    g.throughput(Throughput::Elements(fixture.records() as u64));
    g.bench_function("floor_serde_json_value", |b| {
        b.iter(|| floor_value(black_box(&bytes)))
    });
    g.bench_function("floor_ignored_any", |b| {
        b.iter(|| floor_ignored_any(black_box(&bytes)))
    });
    g.bench_function("decode_route_decide", |b| {
        b.iter(|| fixture.decide(black_box(&bytes)))
    });
    assert_eq!(fixture.decide_from_items(&bytes), summary);
    g.bench_function("items_route_decide", |b| {
        b.iter(|| fixture.decide_from_items(black_box(&bytes)))
    });
    g.bench_function("decode_route_decide_paired", |b| {
        b.iter_custom(|passes| {
            let path = || drop(black_box(fixture.decide(black_box(&bytes))));
            let items = || drop(black_box(fixture.decide_from_items(black_box(&bytes))));
            paired("decode_route_decide", &bytes, &path, &items, None, passes)
        })
    });
    for app in &apps {
        // Each app's floors on its own event's bytes.
        let floor = |which: &str| format!("{}_{which}", app.name);
        g.bench_function(floor("floor_serde_json_value"), |b| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&app.bytes)).unwrap())
        });
        g.bench_function(floor("floor_ignored_any"), |b| {
            b.iter(|| {
                serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&app.bytes)).unwrap()
            })
        });
        g.bench_function(floor("floor_typed"), |b| {
            b.iter(|| black_box(app).floor_typed())
        });
        g.bench_function(app.name, |b| b.iter(|| black_box(app).decide()));
        g.bench_function(format!("{}_items", app.name), |b| {
            b.iter(|| black_box(app).decide_from_items())
        });
        g.bench_function(format!("{}_paired", app.name), |b| {
            b.iter_custom(|passes| {
                let path = || drop(black_box(black_box(app).decide()));
                let items = || drop(black_box(black_box(app).decide_from_items()));
                let typed = || {
                    black_box(black_box(app).floor_typed());
                };
                paired(app.name, &app.bytes, &path, &items, Some(&typed), passes)
            })
        });
    }
    g.finish();
}

/// A path's ratios from [`paired`], each pass's time over the `Value`
/// floor's in the same pass: of the path, of the path through items, and
/// of the typed floor (none for Nishiki's path).
struct Pairs {
    name: &'static str,
    path: Vec<f64>,
    items: Vec<f64>,
    typed: Vec<f64>,
}

/// Every app's [`Pairs`].
static PAIRS: Mutex<Vec<Pairs>> = Mutex::new(Vec::new());

/// `passes` passes over an event's `bytes`, each timing the `Value` floor,
/// the path, the path through items and the `typed` floor one right after
/// the other (every other pass in the reverse order), each pass's ratios
/// kept in [`PAIRS`] under `name`. This machine's speed moves by 20-40%
/// between criterion's runs of two benchmarks, so their means' ratio moves
/// with it; a pass takes milliseconds, and its timings see the same
/// machine.
/// Criterion's figure for it is the path's time alone.
fn paired(
    name: &'static str,
    bytes: &[u8],
    path: &dyn Fn(),
    items: &dyn Fn(),
    typed: Option<&dyn Fn()>,
    passes: u64,
) -> Duration {
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    let typed_time = || typed.map(&time);
    let floor = || drop(black_box(floor_value(black_box(bytes))));
    let mut pairs = Pairs {
        name,
        path: Vec::new(),
        items: Vec::new(),
        typed: Vec::new(),
    };
    let mut total = Duration::ZERO;
    for pass in 0..passes {
        let (v, p, i, t) = if pass % 2 == 0 {
            (time(&floor), time(path), time(items), typed_time())
        } else {
            let t = typed_time();
            let i = time(items);
            let p = time(path);
            (time(&floor), p, i, t)
        };
        let over_value = |d: Duration| d.as_secs_f64() / v.as_secs_f64();
        pairs.path.push(over_value(p));
        pairs.items.push(over_value(i));
        pairs.typed.extend(t.map(over_value));
        total += p;
    }
    let mut all = PAIRS.lock().unwrap();
    match all.iter_mut().find(|p| p.name == name) {
        Some(p) => {
            p.path.extend(pairs.path);
            p.items.extend(pairs.items);
            p.typed.extend(pairs.typed);
        }
        None => all.push(pairs),
    }
    total
}

/// The paired ratios of each path run ([`paired`]): median and quartiles
/// over every pass, warm-up's included.
fn print_pairs() {
    let pairs = PAIRS.lock().unwrap();
    if pairs.is_empty() {
        return;
    }
    let quartiles = |v: &[f64]| {
        if v.is_empty() {
            return "-".to_owned();
        }
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        format!("{:.2}x [{:.2}-{:.2}]", at(0.5), at(0.25), at(0.75))
    };
    println!();
    println!(
        "decide, paired passes: {:<18} {:>19} {:>19} {:>19} {:>7}",
        "path", "/Value [quartiles]", "through items", "typed floor", "passes"
    );
    for p in pairs.iter() {
        println!(
            "paired: {:<18} {:>19} {:>19} {:>19} {:>7}",
            p.name,
            quartiles(&p.path),
            quartiles(&p.items),
            quartiles(&p.typed),
            p.path.len()
        );
    }
}

/// Every allocation (and reallocation) the bench makes, counted: a
/// path's allocations per record are a figure that, unlike its time, does
/// not move with the machine, and they go far to explain its time over
/// the floors. The count costs one uncontended atomic add per allocation,
/// on the paths and the floors alike.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to `System` as it came.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations per record while `f` runs over an event of `records`.
fn allocations(records: usize, f: impl FnOnce()) -> f64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    f();
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / records as f64
}

/// Each path's allocations per record, beside its floors': one line per
/// event, `allocations per record: <path> path <n>, through items <n>,
/// typed floor <n>, Value floor <n>`.
fn print_allocations(fixture: &decide_event::Fixture, bytes: &[u8], apps: &[apps::AppCase]) {
    let records = fixture.records();
    let line = |name: &str, path: f64, items: f64, typed: Option<f64>, value: f64| {
        let typed = typed.map_or("-".to_owned(), |t| format!("{t:.1}"));
        println!(
            "allocations per record: {name:<20} path {path:.1}, through items {items:.1}, \
             typed floor {typed}, Value floor {value:.1}"
        );
    };
    line(
        "decode_route_decide",
        allocations(records, || drop(fixture.decide(bytes))),
        allocations(records, || drop(fixture.decide_from_items(bytes))),
        None,
        allocations(records, || drop(floor_value(bytes))),
    );
    for app in apps {
        let records = app.records();
        line(
            app.name,
            allocations(records, || drop(app.decide())),
            allocations(records, || drop(app.decide_from_items())),
            Some(allocations(records, || {
                app.floor_typed();
            })),
            allocations(records, || drop(floor_value(&app.bytes))),
        );
    }
}

/// The `Value` floor: the event parsed into a `serde_json::Value` (a
/// function of its own, which `scripts/bench-instructions` counts).
#[inline(never)]
fn floor_value(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The `IgnoredAny` floor: every byte of the event read, nothing kept.
#[inline(never)]
fn floor_ignored_any(bytes: &[u8]) -> serde::de::IgnoredAny {
    serde_json::from_slice(bytes).unwrap()
}

criterion_group!(benches, keys, items, stream, decide);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let mut paths: Vec<_> = ["decode_route_decide", "items_route_decide"]
        .into_iter()
        .map(|path| {
            (
                path.to_owned(),
                "floor_serde_json_value".to_owned(),
                "floor_ignored_any".to_owned(),
            )
        })
        .collect();
    paths.extend(apps::cases_names().into_iter().flat_map(|app| {
        [
            app.to_owned(),
            format!("{app}_items"),
            format!("{app}_floor_typed"),
        ]
        .map(|path| {
            (
                path,
                format!("{app}_floor_serde_json_value"),
                format!("{app}_floor_ignored_any"),
            )
        })
    }));
    decide_event::print_ratio(&paths);
    print_pairs();
}
