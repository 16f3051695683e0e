use herd::{FleetRow, Metrics, Model, Params, StoreMetrics, FLEET_ROWS};
fn main() {
    let p = Params::harness();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = match args[0].as_str() { "A" => Model::HardOutage, "B" => Model::Capacity{retry_after:false}, _ => Model::Capacity{retry_after:true} };
    let i: usize = args[1].parse().unwrap();
    let fleet = FLEET_ROWS[i];
    let run = fleet.run(&p, model, 1);
    let m = Metrics::of(&run, &p);
    let s = StoreMetrics::of(&run, &p);
    println!("{} {}: t99 {:?} overload {} failed {} down/s {:.2} shares {:?} accepted {:?}", model.tag(), fleet.label(), m.t99_after_recovery, m.overload, m.failed_retries, m.retries_while_down, m.shares, m.accepted_rate);
    println!("{s:?}");
    // per 100 ms after recovery
    let mut att = vec![0u32; 200]; let mut ok = vec![0u32; 200]; let mut calls = vec![0u32;200];
    for a in &run.arrivals { if a.at >= p.outage { let b = ((a.at - p.outage).as_millis()/100) as usize; if b < 200 { att[b]+=1; if a.ok {ok[b]+=1} } } }
    if let Some(st) = &run.store { for c in &st.calls { if *c >= p.outage { let b = ((*c - p.outage).as_millis()/100) as usize; if b<200 {calls[b]+=1} } } }
    if args.len() > 2 { fine(&run, &p, args[2].parse().unwrap(), args[3].parse().unwrap()); return; }
    for b in 0..140 { if b % 1 == 0 { println!("{:5.1}s att {:5} ok {:5} fail {:4} calls {:4}", b as f64/10.0, att[b], ok[b], att[b]-ok[b], calls[b]); } }
}
#[allow(dead_code)]
fn fine(run: &herd::Run, p: &Params, from_ms: u64, to_ms: u64) {
    let mut bins = std::collections::BTreeMap::new();
    for a in &run.arrivals { if a.at >= p.outage { let ms = (a.at - p.outage).as_millis() as u64; if ms >= from_ms && ms < to_ms { let e = bins.entry(ms / 10).or_insert((0, 0)); e.0 += 1; if !a.ok { e.1 += 1 } } } }
    let line: Vec<String> = bins.iter().map(|(b, (n, f))| format!("{}:{}/{}", b * 10, n, f)).collect();
    println!("{}", line.join(" "));
}
