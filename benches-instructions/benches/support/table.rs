// The table the instruction benches print after their rows (`include!`d, as harness.rs is):
// reads `ROWS`, the including bench's rows.

/// Where gungraun keeps its output: `GUNGRAUN_HOME`, else `$CARGO_TARGET_DIR/gungraun`, else
/// `gungraun` in the target directory this binary was built in (`<target>/release/deps/<bench>`).
fn gungraun_home() -> Option<PathBuf> {
    if let Some(home) = env::var_os("GUNGRAUN_HOME") {
        return Some(home.into());
    }
    if let Some(target) = env::var_os("CARGO_TARGET_DIR") {
        return Some(Path::new(&target).join("gungraun"));
    }
    let exe = env::current_exe().ok()?;
    Some(exe.ancestors().nth(3)?.join("gungraun"))
}

/// The instruction count (`Ir`) of one row, from the `summary:` line of its callgrind profile.
fn instructions(home: &Path, row: &str) -> Option<u64> {
    let bench = format!("success_x100.{row}");
    let profile = home
        .join(env!("CARGO_PKG_NAME"))
        .join(env!("CARGO_CRATE_NAME"))
        .join("success_path")
        .join(&bench)
        .join(format!("callgrind.{bench}.out"));
    let text = fs::read_to_string(profile).ok()?;
    let events = text.lines().find_map(|line| line.strip_prefix("events:"))?;
    let column = events.split_whitespace().position(|event| event == "Ir")?;
    let summary = text
        .lines()
        .find_map(|line| line.strip_prefix("summary:"))?;
    summary.split_whitespace().nth(column)?.parse().ok()
}

/// Runs once, after all rows: prints instructions per call, their ratios to `tower::retry` and to the
/// baseline, and what each layer adds to the baseline. (gungraun hides this output unless it runs
/// with `--nocapture`.)
fn print_table() {
    let Some(home) = gungraun_home() else {
        eprintln!("instructions: cannot find the gungraun output directory");
        return;
    };
    let per_call: Vec<Option<f64>> = ROWS
        .iter()
        .map(|row| instructions(&home, row).map(|count| count as f64 / CALLS as f64))
        .collect();
    let (Some(baseline), Some(tower)) = (per_call[0], per_call[1]) else {
        eprintln!(
            "instructions: the profiles of the first two rows are missing under {}",
            home.display()
        );
        return;
    };
    println!();
    println!("instructions per successful call (callgrind, {CALLS} calls per row)");
    println!(
        "{:<24} {:>10} {:>15} {:>11} {:>13} {:>20}",
        "row", "instr/call", "vs tower_retry", "vs no_layer", "added/call", "added vs tower's"
    );
    for (row, per_call) in ROWS.iter().zip(per_call) {
        match per_call {
            Some(n) => println!(
                "{row:<24} {n:>10.1} {:>14.2}x {:>10.2}x {:>13.1} {:>19.2}x",
                n / tower,
                n / baseline,
                n - baseline,
                (n - baseline) / (tower - baseline)
            ),
            None => println!("{row:<24} {:>10}", "missing"),
        }
    }
}
