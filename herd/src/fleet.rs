//! Fleets: `n` processes that share the endpoint and either nothing else (each
//! paces alone, as independent senders do) or one pacing store ([`DelayedStore`]: the
//! in-process store behind a simulated round trip). What a fleet with a store asks of it is
//! measured here, and the fleet targets are judged.
//!
//! A fleet with a store is also run through an **open phase** after its deliveries: 2 s after
//! every process has the endpoint open again, each sends its share of [`OPEN_PHASE_RATE`]
//! requests per second for a second to the recovered endpoint: the store calls made meanwhile
//! are what an open endpoint costs.

use crate::endpoint::Endpoint;
use crate::fleet_store::DelayedStore;
use crate::metrics::target::FAIR_SHARE_TOLERANCE;
use crate::{webhook, Bound, Check, Metrics, Model, Params, Row, Run};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::RetryLayer;

/// The round trip to the simulated store (Redis on the same network).
pub const STORE_RTT: Duration = Duration::from_millis(1);
/// The open phase's requests per second, fleet-wide (half the endpoint's capacity).
pub const OPEN_PHASE_RATE: u64 = 1_000;
/// How long after every process has the endpoint open the open phase starts.
const OPEN_PHASE_AFTER: Duration = Duration::from_secs(2);
/// "At ≥ 1,000 req/s": the 1-s bins of arrivals at least this busy.
const BUSY: u64 = 1_000;

/// How the processes of a run pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Each alone: the processes share only the endpoint.
    Alone,
    /// Through one pacing store, each call a round trip of `rtt`.
    Store { rtt: Duration },
}

/// One fleet row: a configuration, run as `processes` processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetRow {
    pub row: Row,
    pub processes: usize,
    pub sharing: Sharing,
}

impl FleetRow {
    const fn alone(row: Row, processes: usize) -> Self {
        Self {
            row,
            processes,
            sharing: Sharing::Alone,
        }
    }

    const fn shared(processes: usize) -> Self {
        Self {
            row: Row::Pacer,
            processes,
            sharing: Sharing::Store { rtt: STORE_RTT },
        }
    }

    /// A short name.
    pub fn label(&self) -> String {
        match self.sharing {
            Sharing::Alone if self.row == Row::Pacer => {
                format!("{} × pacer, alone", self.processes)
            }
            Sharing::Alone => format!("{} × {}, alone", self.processes, self.row.label()),
            Sharing::Store { .. } => format!("{} × pacer, shared store", self.processes),
        }
    }

    /// Runs it with `seed`.
    pub fn run(&self, p: &Params, model: Model, seed: u64) -> Run {
        crate::run_sharing(p, model, self.row, seed, self.processes, self.sharing)
    }
}

/// The fleet rows, in table order: the pacer's processes alone, then with a store. (Other
/// policies' fleets of 10 alone are the harness's section on fleets of independent senders.)
pub const FLEET_ROWS: [FleetRow; 4] = [
    FleetRow::alone(Row::Pacer, 10),
    FleetRow::alone(Row::Pacer, 100),
    FleetRow::shared(10),
    FleetRow::shared(100),
];

/// What the processes of a fleet asked of their store.
#[derive(Clone, Debug, Default)]
pub struct StoreUse {
    /// When each call was made (from the start), during the deliveries.
    pub calls: Vec<Duration>,
    /// Background reads of views older than the view's time to live, during the deliveries.
    pub reads: u64,
    /// The open phase.
    pub open: OpenPhase,
}

/// The open phase's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenPhase {
    pub sent: u64,
    pub delivered: u64,
    /// Calls made by the pacer (on a request's path, or for it) during the phase.
    pub calls: u64,
    /// Background reads during the phase.
    pub reads: u64,
}

/// Sends the open phase through `layers` (see the module's docs) and says what the fleet
/// asked of its store during the deliveries and during the phase.
pub(crate) async fn open_phase(
    layers: &[RetryLayer],
    stores: &[DelayedStore],
    endpoint: &Endpoint,
    start: Instant,
) -> StoreUse {
    // Until every process has the endpoint open (its last deliveries may be slower than the
    // fleet's ramp), then a while more.
    for _ in 0..300 {
        let open = layers.iter().all(|layer| {
            layer
                .pacing_stats(None)
                .map_or(true, |stats| stats.mode == PacingMode::Open)
        });
        if open {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(OPEN_PHASE_AFTER).await;
    let reads_before: u64 = stores.iter().map(DelayedStore::reads).sum();
    let begins = Instant::now();
    let processes = layers.len() as u64;
    let per_process = (OPEN_PHASE_RATE / processes).max(1);
    let gap = Duration::from_secs(1) / per_process as u32;
    let mut tasks = JoinSet::new();
    for (i, layer) in layers.iter().enumerate() {
        let service = layer.layer(endpoint.clone());
        // The processes' requests interleave: the fleet's rate is smooth.
        let offset = gap * i as u32 / processes as u32;
        tasks.spawn(async move {
            tokio::time::sleep(offset).await;
            let mut sends = JoinSet::new();
            for n in 0..per_process {
                let id = p_offset(i, n as usize, processes as usize);
                let service = service.clone();
                sends.spawn(async move { service.oneshot(webhook(id)).await });
                tokio::time::sleep(gap).await;
            }
            let results = sends.join_all().await;
            results
                .into_iter()
                .filter(|r| matches!(r, Ok(response) if response.status().is_success()))
                .count() as u64
        });
    }
    let delivered = tasks.join_all().await.into_iter().sum();
    let mut calls = Vec::new();
    let mut open_calls = 0;
    for store in stores {
        for at in store.call_times() {
            if at >= begins {
                open_calls += 1;
            } else {
                calls.push(at.duration_since(start));
            }
        }
    }
    calls.sort_unstable();
    let reads_after: u64 = stores.iter().map(DelayedStore::reads).sum();
    StoreUse {
        calls,
        reads: reads_before,
        open: OpenPhase {
            sent: per_process * processes,
            delivered,
            calls: open_calls,
            reads: reads_after - reads_before,
        },
    }
}

/// The open phase's delivery ids: past the run's, one range per process.
fn p_offset(process: usize, n: usize, processes: usize) -> usize {
    1_000_000 + n * processes + process
}

/// A fleet's store figures for one run.
#[derive(Clone, Copy, Debug)]
pub struct StoreMetrics {
    /// Calls during the deliveries.
    pub calls: u64,
    /// Calls per attempt in the 1-s bins with at least 1,000 attempts (the endpoint paced);
    /// `None` when no bin was that busy.
    pub per_request_busy: Option<f64>,
    /// Calls per attempt from recovery to the last delivery.
    pub per_request_recovery: f64,
    /// The open phase: calls per request.
    pub open_per_request: f64,
    pub open: OpenPhase,
    pub reads: u64,
}

impl StoreMetrics {
    /// `None` for a fleet without a store.
    pub fn of(run: &Run, p: &Params) -> Option<Self> {
        let store = run.store.as_ref()?;
        let bins = crate::per_second(&run.arrivals);
        let mut call_bins = vec![0u64; bins.len().max(1)];
        for at in &store.calls {
            let bin = (at.as_secs() as usize).min(call_bins.len() - 1);
            call_bins[bin] += 1;
        }
        let busy: Vec<usize> = (p.outage_secs()..bins.len())
            .filter(|&s| bins[s] >= BUSY)
            .collect();
        let busy_calls: u64 = busy.iter().map(|&s| call_bins[s]).sum();
        let busy_attempts: u64 = busy.iter().map(|&s| bins[s]).sum();
        let recovery_calls = store.calls.iter().filter(|at| **at >= p.outage).count();
        let recovery_attempts = run.arrivals.iter().filter(|a| a.at >= p.outage).count();
        Some(Self {
            calls: store.calls.len() as u64,
            per_request_busy: (busy_attempts > 0).then(|| busy_calls as f64 / busy_attempts as f64),
            per_request_recovery: recovery_calls as f64 / recovery_attempts.max(1) as f64,
            open_per_request: store.open.calls as f64 / store.open.sent.max(1) as f64,
            open: store.open,
            reads: store.reads,
        })
    }
}

/// The fleet targets for a fleet row (one entry per seed, judged on every seed): with a store,
/// the load on the dead endpoint, fair shares within ±10 %, the delivery and overload bounds,
/// and the store calls per request while paced and while open; without one, the fair shares
/// of 10 processes within ±25 % (one of the first targets, printed with the others).
pub fn fleet_targets(
    p: &Params,
    fleet: &FleetRow,
    metrics: &[Metrics],
    store: &[Option<StoreMetrics>],
) -> Vec<Check> {
    let Some(first) = metrics.first() else {
        return Vec::new();
    };
    let deviation = |m: &Metrics| {
        m.shares
            .map(|(min, max)| (1.0 - min).max(max - 1.0) * 100.0)
    };
    if fleet.sharing == Sharing::Alone {
        if fleet.row != Row::Pacer || fleet.processes != 10 {
            return Vec::new();
        }
        return vec![Check {
            name: format!(
                "without a store: each process within ±{:.0} % of fair",
                FAIR_SHARE_TOLERANCE * 100.0
            ),
            bound: Bound::AtMost(FAIR_SHARE_TOLERANCE * 100.0),
            unit: " %",
            decimals: 1,
            figures: metrics.iter().map(deviation).collect(),
            missing: "none delivered in the window".to_string(),
        }];
    }
    let probe_rate = 2.0;
    let mut checks = vec![
        Check {
            name: format!(
                "load on the dead endpoint: retries/s while down ≤ {:.0} (one probe stream, \
                 {probe_rate:.0}/s ± 50 %)",
                probe_rate * 1.5
            ),
            bound: Bound::AtMost(probe_rate * 1.5),
            unit: "/s",
            decimals: 2,
            figures: metrics.iter().map(|m| Some(m.retries_while_down)).collect(),
            missing: String::new(),
        },
        Check {
            name: "each process within ±10 % of fair".to_string(),
            bound: Bound::AtMost(10.0),
            unit: " %",
            decimals: 1,
            figures: metrics.iter().map(deviation).collect(),
            missing: "none delivered in the window".to_string(),
        },
    ];
    let t99 = metrics
        .iter()
        .map(|m| m.t99_after_recovery.map(|t| t.as_secs_f64()))
        .collect();
    match first.model {
        Model::HardOutage => checks.push(Check {
            name: "99 % delivered ≤ 3.0 s after recovery (the first targets' model A bound)"
                .to_string(),
            bound: Bound::AtMost(3.0),
            unit: " s",
            decimals: 1,
            figures: t99,
            missing: "never".to_string(),
        }),
        Model::Capacity { .. } => {
            let bound = (p.drain_time() + Duration::from_secs(2)).as_secs_f64();
            checks.push(Check {
                name: format!("99 % delivered ≤ {bound:.1} s after recovery (N/C + 2 s)"),
                bound: Bound::AtMost(bound),
                unit: " s",
                decimals: 1,
                figures: t99,
                missing: "never".to_string(),
            });
            let bound = p.deliveries as f64 * 0.01;
            checks.push(Check {
                name: format!("overload 503s ≤ {bound:.0} (1 % of N)"),
                bound: Bound::AtMost(bound),
                unit: "",
                decimals: 0,
                figures: metrics.iter().map(|m| Some(m.overload as f64)).collect(),
                missing: String::new(),
            });
        }
    }
    checks.push(Check {
        name: format!("store calls per request while paced at ≥ {BUSY} req/s ≤ 0.1"),
        bound: Bound::AtMost(0.1),
        unit: "",
        decimals: 3,
        figures: store
            .iter()
            .map(|s| s.and_then(|s| s.per_request_busy))
            .collect(),
        missing: format!("no second at ≥ {BUSY} req/s"),
    });
    checks.push(Check {
        name: format!("store calls while open (open phase, {OPEN_PHASE_RATE} req/s for 1 s) = 0"),
        bound: Bound::AtMost(0.0),
        unit: "",
        decimals: 0,
        figures: store
            .iter()
            .map(|s| s.map(|s| s.open.calls as f64))
            .collect(),
        missing: String::new(),
    });
    checks
}
