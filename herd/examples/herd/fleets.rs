//! The fleets: 10 and 100 processes of the pacer that pace alone or share one
//! pacing store (`herd::fleet_store::DelayedStore`, the in-process store behind a simulated
//! round trip), for models A, B and B+RA: one table of figures and one of the fleet targets
//! per model.

use crate::{mean, optional, shares, t99, SEEDS};
use herd::{fleet_targets, spread, FleetRow, Metrics, Model, Params, StoreMetrics, FLEET_ROWS};
use std::fmt::Write as _;

/// The section: every model, every fleet row, every seed.
pub(crate) fn shared_store(p: &Params, runs: &mut usize) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    writeln!(
        out,
        "## Fleets with a shared pacing store: {} deliveries over 10 or 100 \
         processes\n",
        p.deliveries
    )?;
    writeln!(
        out,
        "Each process has its own layer (the pacer row's configuration), seed and budget, and \
         its deliveries (delivery i is sent by process i mod n, all at t = 0). **Alone**: the \
         processes share only the endpoint. **Shared store**: each process's pacing has \
         `Pacing::builder().store(..)` on one in-process store behind a simulated round trip of \
         {:?} on the paused clock (a Redis on the same network; a handle's cached view is what \
         its last call or background read brought, read again past {:?}, as `RedisStore` \
         does). Store calls per request are calls through every handle over the endpoint's \
         attempts: **while paced** in the 1-s bins after recovery with at least 1,000 \
         attempts, **recovery** from recovery to the last delivery, **while open** in an open \
         phase run after the deliveries (2 s after every process has the endpoint open, the \
         fleet sends {} requests per second for 1 s to the recovered endpoint).\n",
        herd::STORE_RTT,
        herd::fleet_store::VIEW_TTL,
        herd::OPEN_PHASE_RATE,
    )?;
    for model in Model::ALL {
        writeln!(out, "### {}\n", model.label())?;
        let mut results = Vec::new();
        for fleet in FLEET_ROWS {
            let mut metrics = Vec::new();
            let mut store = Vec::new();
            for seed in SEEDS {
                let run = fleet.run(p, model, seed);
                *runs += 1;
                metrics.push(Metrics::of(&run, p));
                store.push(StoreMetrics::of(&run, p));
            }
            results.push((fleet, metrics, store));
        }
        out.push_str(&table(&results)?);
        out.push_str(&targets(p, &results)?);
    }
    Ok(out)
}

type Results = [(FleetRow, Vec<Metrics>, Vec<Option<StoreMetrics>>)];

/// One line per fleet row: every column as "mean (min–max)" over the seeds.
fn table(results: &Results) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    writeln!(
        out,
        "| fleet | 99 % delivered, after recovery | delivered | overload 503s | failed retries \
         | retries/s while down | process share of fair, min – max | store calls/request while \
         paced | store calls/request, recovery | store calls while open (per request) |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for (fleet, metrics, store) in results {
        let column = |f: &dyn Fn(&Metrics) -> f64, decimals: usize| {
            spread(&metrics.iter().map(f).collect::<Vec<_>>(), decimals)
        };
        let (t99, shares) = (t99(metrics), shares(metrics));
        let stores: Vec<StoreMetrics> = store.iter().flatten().copied().collect();
        let (paced, recovery, open) = if stores.is_empty() {
            ("—".to_string(), "—".to_string(), "—".to_string())
        } else {
            (
                optional(
                    stores.iter().map(|s| s.per_request_busy),
                    3,
                    "",
                    "no second at ≥ 1,000 req/s",
                ),
                spread(
                    &stores
                        .iter()
                        .map(|s| s.per_request_recovery)
                        .collect::<Vec<_>>(),
                    3,
                ),
                format!(
                    "{} ({})",
                    spread(
                        &stores
                            .iter()
                            .map(|s| s.open.calls as f64)
                            .collect::<Vec<_>>(),
                        0
                    ),
                    spread(
                        &stores
                            .iter()
                            .map(|s| s.open_per_request)
                            .collect::<Vec<_>>(),
                        3
                    )
                ),
            )
        };
        writeln!(
            out,
            "| {} | {t99} | {} % | {} | {} | {} | {shares} | {paced} | {recovery} | {open} |",
            fleet.label(),
            column(&|m| m.delivered * 100.0, 2),
            column(&|m| m.overload as f64, 0),
            column(&|m| m.failed_retries as f64, 0),
            column(&|m| m.retries_while_down, 2),
        )?;
    }
    writeln!(out)?;
    let calls: Vec<f64> = results
        .iter()
        .flat_map(|(_, _, store)| store.iter().flatten().map(|s| s.calls as f64))
        .collect();
    if !calls.is_empty() {
        writeln!(
            out,
            "Store calls during the deliveries, per run of a shared fleet: {:.0} on average.\n",
            mean(&calls, |c| *c)
        )?;
    }
    Ok(out)
}

/// The fleet targets, judged on every seed, a line per fleet row and target.
fn targets(p: &Params, results: &Results) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    writeln!(out, "The fleet targets (met when every seed meets it):\n")?;
    writeln!(out, "| fleet | target | verdict |\n|---|---|---|")?;
    for (fleet, metrics, store) in results {
        for check in fleet_targets(p, fleet, metrics, store) {
            writeln!(
                out,
                "| {} | {} | {} |",
                fleet.label(),
                check.name,
                check.verdict()
            )?;
        }
    }
    writeln!(out)?;
    Ok(out)
}
