//! With the `metrics` feature: the store's calls, errors, fallback episodes and rejoins as
//! counters, labelled with the store's prefix (one fleet per prefix: a fixed set of values).

#[cfg(feature = "metrics")]
mod on {
    use metrics::{Key, KeyName, Label, Level, Metadata, SharedString, Unit};

    const CALLS: &str = "http_client_retry_pacer_store_calls_total";
    const ERRORS: &str = "http_client_retry_pacer_store_errors_total";
    const FALLBACKS: &str = "http_client_retry_pacer_store_fallbacks_total";
    const REJOINS: &str = "http_client_retry_pacer_store_rejoins_total";

    static METADATA: Metadata<'static> =
        Metadata::new("tower_http_retry_redis", Level::INFO, Some(module_path!()));

    /// One store's keys, made once.
    #[derive(Debug)]
    pub(crate) struct Keys {
        calls: Key,
        errors: Key,
        fallbacks: Key,
        rejoins: Key,
    }

    impl Keys {
        pub(crate) fn new(prefix: &str) -> Self {
            let key = |name: &'static str| {
                Key::from_parts(name, vec![Label::new("prefix", prefix.to_owned())])
            };
            Self {
                calls: key(CALLS),
                errors: key(ERRORS),
                fallbacks: key(FALLBACKS),
                rejoins: key(REJOINS),
            }
        }

        fn count(key: &Key) {
            metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
        }

        pub(crate) fn call(&self) {
            Self::count(&self.calls);
        }

        pub(crate) fn error(&self) {
            Self::count(&self.errors);
        }

        pub(crate) fn fallback(&self) {
            Self::count(&self.fallbacks);
        }

        pub(crate) fn rejoin(&self) {
            Self::count(&self.rejoins);
        }
    }

    /// Describes the store's metrics (unit and help text) to the recorder installed now, as
    /// the core's `telemetry::describe_metrics` does for the layer's.
    ///
    /// | name | type | labels | what |
    /// |---|---|---|---|
    /// | `http_client_retry_pacer_store_calls_total` | counter | `prefix` | Redis calls made (each script call; a compare-and-set tried again counts again) |
    /// | `http_client_retry_pacer_store_errors_total` | counter | `prefix` | calls that failed (a timeout, a connection error, an error for one key) |
    /// | `http_client_retry_pacer_store_fallbacks_total` | counter | `prefix` | episodes of Redis lost: from then on each endpoint is paced by this process's fallback |
    /// | `http_client_retry_pacer_store_rejoins_total` | counter | `prefix` | episodes ended: Redis answered again |
    ///
    /// A fallback counter that moved while its rejoin counter did not is a process pacing alone
    /// now: alert on `fallbacks - rejoins > 0` for longer than a few seconds.
    pub fn describe_metrics() {
        let text = SharedString::const_str;
        let name = KeyName::from_const_str;
        metrics::with_recorder(|r| {
            r.describe_counter(
                name(CALLS),
                Some(Unit::Count),
                text("Pacing store calls to Redis."),
            );
            r.describe_counter(
                name(ERRORS),
                Some(Unit::Count),
                text("Pacing store calls that failed."),
            );
            r.describe_counter(
                name(FALLBACKS),
                Some(Unit::Count),
                text("Episodes of Redis lost, each endpoint paced by the process's fallback."),
            );
            r.describe_counter(
                name(REJOINS),
                Some(Unit::Count),
                text("Episodes of Redis back."),
            );
        });
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    /// Without the `metrics` feature: nothing to record.
    #[derive(Debug)]
    pub(crate) struct Keys;

    impl Keys {
        pub(crate) fn new(_prefix: &str) -> Self {
            Keys
        }

        #[inline(always)]
        pub(crate) fn call(&self) {}

        #[inline(always)]
        pub(crate) fn error(&self) {}

        #[inline(always)]
        pub(crate) fn fallback(&self) {}

        #[inline(always)]
        pub(crate) fn rejoin(&self) {}
    }
}

#[cfg(feature = "metrics")]
pub use on::describe_metrics;
pub(crate) use on::Keys;
