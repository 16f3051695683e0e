//! One worker process of the durable path: `redelivery-worker <engine> <name> <seconds per
//! hour>`, where the engine is a SQLite file, a `redis://` or a `postgres://` URL. It runs until its standard
//! input closes, or until it is killed.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, engine, name, seconds_per_hour] = &args[..] else {
        eprintln!("usage: redelivery-worker <database, redis:// or postgres:// URL> <name> <seconds per hour>");
        std::process::exit(2);
    };
    let seconds_per_hour: f64 = seconds_per_hour
        .parse()
        .expect("seconds per hour: a number");
    demo::durable::run_worker(
        &demo::durable::Engine::parse(engine),
        name,
        seconds_per_hour,
    );
}
