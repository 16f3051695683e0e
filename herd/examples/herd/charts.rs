//! The charts: requests and accepted (2xx) requests per second over time, per model, for the
//! charted rows (first seed), as SVG.

use crate::SEEDS;
use herd::{Model, Params, Row};
use plotters::prelude::*;
use std::error::Error;
use std::path::{Path, PathBuf};

/// Colours that stay the same for a row in every chart.
fn colour(row: Row) -> RGBColor {
    match row {
        Row::Plain => RGBColor(214, 39, 40),
        Row::Tower => RGBColor(255, 127, 14),
        Row::TowerBackoffOnly => RGBColor(140, 86, 75),
        Row::Full => RGBColor(31, 119, 180),
        Row::FullBudget => RGBColor(44, 160, 44),
        Row::DecorrelatedBudget => RGBColor(148, 103, 189),
        Row::Pacer => RGBColor(23, 190, 207),
        _ => RGBColor(127, 127, 127),
    }
}

/// Empty bins are drawn on this floor of the logarithmic axis.
const FLOOR: f64 = 0.7;

/// Per charted row: requests/s and accepted/s.
pub(crate) type Series = Vec<(Row, Vec<u64>, Vec<u64>)>;

pub(crate) fn draw_charts(
    docs: &Path,
    p: &Params,
    charts: &[(Model, Series)],
) -> Result<(), Box<dyn Error>> {
    let panel = |model: Model| {
        charts
            .iter()
            .find(|(m, _)| *m == model)
            .map(|(_, series)| (model, series))
            .expect("every model was run")
    };
    let subtitle = format!(
        "{} deliveries at t = 0, endpoint down 0–{} s, {:?} latency; base {:?}, cap {:?}, {} attempts; seed {}",
        p.deliveries,
        p.outage.as_secs(),
        p.latency,
        p.base,
        p.cap,
        p.max_attempts,
        SEEDS[0]
    );
    draw(
        docs.join("herd-a.svg"),
        &format!("Model A: hard outage, then every request succeeds\n{subtitle}"),
        &[panel(Model::HardOutage)],
        p,
    )?;
    draw(
        docs.join("herd-b.svg"),
        &format!(
            "Model B: after the outage a token bucket admits {}/s ({} per {:?}), the rest 503\n{subtitle}",
            p.capacity_per_second,
            p.tokens_per_tick(),
            p.capacity_tick
        ),
        &[
            panel(Model::Capacity { retry_after: false }),
            panel(Model::Capacity { retry_after: true }),
        ],
        p,
    )
}

/// A step line: each 1-s bin is a flat segment over its second.
fn steps(bins: &[u64]) -> Vec<(f64, f64)> {
    bins.iter()
        .enumerate()
        .flat_map(|(t, &count)| {
            let y = (count as f64).max(FLOOR);
            [(t as f64, y), (t as f64 + 1.0, y)]
        })
        .collect()
}

fn draw(
    path: PathBuf,
    title: &str,
    panels: &[(Model, &Series)],
    p: &Params,
) -> Result<(), Box<dyn Error>> {
    let height = 80 + 520 * panels.len() as u32;
    let root = SVGBackend::new(&path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(80);
    for (i, line) in title.lines().enumerate() {
        let size = if i == 0 { 24 } else { 16 };
        head.draw_text(
            line,
            &("sans-serif", size).into_font().color(&BLACK),
            (20, 12 + 32 * i as i32),
        )?;
    }
    let outage = p.outage.as_secs_f64();
    for (area, (model, series)) in body.split_evenly((panels.len(), 1)).iter().zip(panels) {
        let x_max = series
            .iter()
            .map(|(_, requests, _)| requests.len())
            .max()
            .unwrap_or(1) as f64
            + 2.0;
        let y_max = series
            .iter()
            .flat_map(|(_, requests, _)| requests.iter().copied())
            .max()
            .unwrap_or(1) as f64
            * 100.0; // two empty decades on top hold the legend
        let mut chart = ChartBuilder::on(area)
            .caption(model.label(), ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(0f64..x_max, (FLOOR..y_max).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("virtual time since the deliveries started (s)")
            .y_desc("per second at the endpoint (1-s bins, log scale)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| {
                if *v < 1.0 {
                    "0".to_string()
                } else {
                    format!("{v:.0}")
                }
            })
            .light_line_style(WHITE)
            .draw()?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, FLOOR), (outage, y_max)],
                BLACK.mix(0.08).filled(),
            )))?
            .label(format!("outage (0–{} s)", p.outage.as_secs()))
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 6), (x + 20, y + 6)], BLACK.mix(0.15).filled())
            });
        if matches!(model, Model::Capacity { .. }) {
            let capacity = p.capacity_per_second as f64;
            chart
                .draw_series(LineSeries::new(
                    [(outage, capacity), (x_max, capacity)],
                    BLACK.mix(0.4).stroke_width(1),
                ))?
                .label(format!("capacity ({}/s)", p.capacity_per_second))
                .legend(|(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.4).stroke_width(1))
                });
        }
        for (row, requests, accepted) in series.iter() {
            // Accepted as a shaded area under the requests line: where every request is accepted
            // the two coincide, and a second line would hide under the first.
            let ok = colour(*row).mix(0.3).filled();
            chart
                .draw_series(
                    accepted
                        .iter()
                        .enumerate()
                        .filter(|(_, &n)| n > 0)
                        .map(|(t, &n)| {
                            Rectangle::new([(t as f64, FLOOR), (t as f64 + 1.0, n as f64)], ok)
                        }),
                )?
                .label(format!("{}: accepted (2xx)", row.label()))
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 20, y + 6)], ok));
            let sent = colour(*row).stroke_width(2);
            chart
                .draw_series(LineSeries::new(steps(requests), sent))?
                .label(format!("{}: requests", row.label()))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], sent));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.5))
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
