//! The release rate of a paced endpoint: slow start from the probe rate, then CUBIC-style
//! congestion avoidance. Pure arithmetic on rates in requests per second and elapsed seconds,
//! tested without a clock.
//!
//! The shape is the AWS SDK client rate limiter's (itself TCP CUBIC's), with one change: its
//! constant `C = 0.4` takes about `cbrt(W_max * 0.3 / 0.4)` seconds to regain `W_max`, 11 s at
//! 2,000 requests per second, so a large endpoint would sit at 70 % of what it accepts for most
//! of that time. Here `C` is derived from `W_max` so that the rate regains `W_max` in a fixed
//! time, whatever its size.

/// How the rate reacts to losses; checked by the builder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RateConfig {
    /// The rate a ramp starts from (the probe rate), per second.
    pub(crate) floor: f64,
    /// The highest rate ever set, per second: a bound, not a target.
    pub(crate) ceiling: f64,
    /// The fraction of the accepted rate kept after a loss (`β`).
    pub(crate) decrease: f64,
    /// Seconds the cubic growth takes to regain the rate of the last loss (`K`).
    pub(crate) regain_secs: f64,
}

/// The phase of a ramp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ramp {
    /// Doubling every interval from the floor while losses stay low.
    SlowStart { rate: f64 },
    /// After a loss: `W(t) = C (t - K)^3 + W_max`, `t` seconds since the loss.
    Cubic { last_max: f64, since_loss_secs: f64 },
}

impl Ramp {
    pub(crate) fn start(config: &RateConfig) -> Self {
        Ramp::SlowStart { rate: config.floor }
    }

    /// The rate now.
    pub(crate) fn rate(&self, config: &RateConfig) -> f64 {
        let rate = match *self {
            Ramp::SlowStart { rate } => rate,
            Ramp::Cubic {
                last_max,
                since_loss_secs,
            } => cubic(config, last_max, since_loss_secs),
        };
        rate.clamp(config.floor, config.ceiling)
    }

    /// A request released by the ramp succeeded. In slow start each success adds
    /// `1 / interval` per second, so a rate whose releases all succeed doubles every interval
    /// (TCP's slow start, one success standing for one acknowledgement); a rate that finds no
    /// demand does not grow.
    pub(crate) fn on_success(&mut self, config: &RateConfig, interval_secs: f64) {
        if let Ramp::SlowStart { rate } = self {
            *rate = (*rate + 1.0 / interval_secs).min(config.ceiling);
        }
    }

    /// The rate of the last loss, once there was one.
    pub(crate) fn last_max(&self) -> Option<f64> {
        match *self {
            Ramp::SlowStart { .. } => None,
            Ramp::Cubic { last_max, .. } => Some(last_max),
        }
    }

    /// An interval passed with losses under the threshold: the cubic curve moves on.
    pub(crate) fn interval_passed(&mut self, interval_secs: f64) {
        if let Ramp::Cubic {
            since_loss_secs, ..
        } = self
        {
            *since_loss_secs += interval_secs;
        }
    }

    /// Losses above the threshold while `accepted` requests per second succeeded: the rate
    /// drops to `β * accepted`, and the cubic growth aims back at `accepted` — never at the rate
    /// that was sent, which the endpoint did not take.
    pub(crate) fn lose(&mut self, config: &RateConfig, accepted: f64) {
        let sent = self.rate(config);
        let last_max = accepted.min(sent).max(config.floor);
        *self = Ramp::Cubic {
            last_max,
            since_loss_secs: 0.0,
        };
    }
}

/// `C (t - K)^3 + W_max`, with `K = regain_secs` and `C` such that the rate right after the
/// loss is `β * W_max`.
fn cubic(config: &RateConfig, last_max: f64, t: f64) -> f64 {
    let k = config.regain_secs;
    let c = last_max * (1.0 - config.decrease) / (k * k * k);
    let d = t - k;
    c * d * d * d + last_max
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: RateConfig = RateConfig {
        floor: 2.0,
        ceiling: 1e6,
        decrease: 0.7,
        regain_secs: 1.0,
    };

    #[test]
    fn slow_start_doubles_per_interval_when_every_release_succeeds() {
        let mut ramp = Ramp::SlowStart { rate: 100.0 };
        // 100/s over a 0.1 s interval: 10 releases, 10 successes.
        for _ in 0..10 {
            ramp.on_success(&CONFIG, 0.1);
        }
        assert!((ramp.rate(&CONFIG) - 200.0).abs() < 1e-6);
    }

    #[test]
    fn a_loss_keeps_beta_of_what_was_accepted_and_regains_it_in_k_seconds() {
        let mut ramp = Ramp::SlowStart { rate: 4096.0 };
        ramp.lose(&CONFIG, 2000.0);
        assert!((ramp.rate(&CONFIG) - 1400.0).abs() < 1e-6);
        for _ in 0..10 {
            ramp.interval_passed(0.1);
        }
        assert!((ramp.rate(&CONFIG) - 2000.0).abs() < 1e-6);
        ramp.interval_passed(0.5);
        assert!(ramp.rate(&CONFIG) > 2000.0, "probes past the last maximum");
    }

    #[test]
    fn the_last_maximum_never_exceeds_the_rate_sent() {
        let mut ramp = Ramp::SlowStart { rate: 100.0 };
        ramp.lose(&CONFIG, 5000.0); // a burst of successes counted against a lower rate
        for _ in 0..10 {
            ramp.interval_passed(0.1);
        }
        assert!((ramp.rate(&CONFIG) - 100.0).abs() < 1e-6);
    }

    #[test]
    fn the_rate_stays_within_floor_and_ceiling() {
        let mut ramp = Ramp::SlowStart { rate: 3.0 };
        ramp.lose(&CONFIG, 0.0);
        assert_eq!(ramp.rate(&CONFIG), CONFIG.floor);
        let mut ramp = Ramp::SlowStart { rate: 1e6 };
        ramp.on_success(&CONFIG, 0.1);
        assert_eq!(ramp.rate(&CONFIG), CONFIG.ceiling);
    }
}
