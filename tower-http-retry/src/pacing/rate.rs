//! The release rate of a paced endpoint: slow start from the probe rate, then CUBIC-style
//! congestion avoidance. Pure arithmetic on rates in requests per second and elapsed seconds,
//! tested without a clock.
//!
//! The shape is the AWS SDK client rate limiter's (itself TCP CUBIC's), with one change: its
//! constant `C = 0.4` takes about `cbrt(W_max * 0.3 / 0.4)` seconds to regain `W_max`, 11 s at
//! 2,000 requests per second, so a large endpoint would sit at 70 % of what it accepts for most
//! of that time. Here `C` is derived from `W_max` so that the rate regains `W_max` in a fixed
//! time, whatever its size.
//!
//! That makes the cubic curve scale with `W_max`: two senders that share an endpoint without
//! sharing their state grow in proportion to their own rates and keep whatever ratio their
//! start gave them (a multiplicative increase does not converge to fairness: Chiu and Jain,
//! 1989). So, as TCP CUBIC's "TCP-friendly region" (RFC 8312, section 4.2), the rate after a
//! loss never falls below the line that additive increase would have reached from the cut:
//! `β W_max + α t`, with `α` the same for every sender whatever its rate. A sender with a large
//! share is on its cubic curve, which is above the line; one with a small share is lifted by
//! the line towards the others.

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
    /// The additive increase after a loss (`α`), per second per second: the least the rate
    /// grows, whatever its size. See [`additive_increase`].
    pub(crate) additive: f64,
}

/// RFC 8312's additive increase for CUBIC's TCP-friendly region, `3 (1 - β) / (1 + β)` segments
/// per round trip per round trip, in a rate's units: the pacer's round trip is its measuring
/// interval (as in slow start, where each success adds `1 / interval`), so the rate grows by
/// that many requests per interval every interval.
pub(crate) fn additive_increase(decrease: f64, interval_secs: f64) -> f64 {
    3.0 * (1.0 - decrease) / (1.0 + decrease) / (interval_secs * interval_secs)
}

/// The phase of a ramp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ramp {
    /// Doubling every interval from the floor while losses stay low.
    SlowStart { rate: f64 },
    /// After a loss: `W(t) = max(C (t - K)^3 + W_max, β W_max + α t)`, `t` seconds since the
    /// loss.
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
            } => cubic(config, last_max, since_loss_secs)
                .max(config.decrease * last_max + config.additive * since_loss_secs),
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
        additive: 0.0,
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
    fn after_a_loss_the_rate_grows_at_least_additively_whatever_its_size() {
        let config = RateConfig {
            additive: additive_increase(0.7, 0.1),
            ..CONFIG
        };
        // 3 * 0.3 / 1.7 requests per 100-ms interval, every interval.
        assert!(
            (config.additive - 52.941).abs() < 1e-3,
            "{}",
            config.additive
        );
        let mut small = Ramp::SlowStart { rate: 100.0 };
        let mut large = Ramp::SlowStart { rate: 5000.0 };
        small.lose(&config, 40.0);
        large.lose(&config, 2000.0);
        for _ in 0..10 {
            small.interval_passed(0.1);
            large.interval_passed(0.1);
        }
        // The small rate is on the additive line, 28/s + 52.9/s: past its own last maximum
        // (the cubic curve regains only 40/s in a second).
        let expected = 0.7 * 40.0 + config.additive;
        assert!(
            (small.rate(&config) - expected).abs() < 1e-6,
            "{}",
            small.rate(&config)
        );
        // The large one is on its cubic curve, as without the line: 2,000/s after a second.
        assert!(
            (large.rate(&config) - 2000.0).abs() < 1e-6,
            "{}",
            large.rate(&config)
        );
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
