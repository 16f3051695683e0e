//! Endpoint pacing shared by a fleet: the state every process of a fleet keeps of an endpoint
//! in one [`PacingStore`], so that ten or a hundred senders probe a dead endpoint as one, pause
//! as one, and share one learned rate at fair shares.
//!
//! # What is shared, what stays in the process
//!
//! Per endpoint the fleet shares a small value (`SharedState`, in `pacing/shared/`):
//!
//! * the **mode**: open, down and probing, paused until a time, or ramping;
//! * the **learned rate**: the ramp (slow start, then cubic after a loss) and the counts of the
//!   current measuring interval, which every process adds its outcomes to ([`Event::Report`]);
//! * **one probe stream**: the next probe's time and the probes in flight, each a [`Lease`]
//!   that expires, so a process that dies holding one blocks nothing for long;
//! * **release slots** while ramping: GCRA's next free slot at the fleet's rate. A process
//!   takes up to [`Release::Slots`]`.count` slots in one call (about 16 at high rates, one ramp
//!   interval's worth in slow start), so a fleet calls the store about once per 16 releases;
//! * the **peers**: processes that asked lately, for fair shares and for the fallback.
//!
//! Each process keeps to itself what only it can hold: its queue of waiting requests and their
//! wakers, the slots it was granted and not used yet, its outcomes not reported yet, and its
//! own run of congestion outcomes while the endpoint is open (an outage is noticed locally,
//! without a call per request, and reported once: [`Event::Down`]).
//!
//! # One transition function, two stores
//!
//! The shared state is a plain value with one transition, `SharedState::apply(op, now)`, in
//! store time, unit-tested with `now` passed in. Every store runs exactly that:
//!
//! * [`InProcessStore`] keeps the values under a lock and applies events to them in place:
//!   the answer is ready at once ([`StoreCall::into_ready`]), with no await point.
//! * A remote store, such as the `RedisStore` of the `tower-http-retry-redis` crate, keeps each
//!   value as a versioned [`Record`](remote::Record) and runs the same function in the process
//!   on the record it last read ([`remote`] holds what it needs); its compare-and-set writes the
//!   result only if the version is unchanged, and otherwise returns the record as it is, to
//!   apply the events to again. The store orders the writes and tells the time; it never runs a
//!   rule.
//!
//! The other way, the transitions written in Lua, would take one round trip per event with no
//! retries, but puts the pacer's rules in two languages (Lua for Redis, Rust for the process),
//! to be kept equal by hand while they change; rules in Lua are
//! also slower to test and run inside Redis's single thread. With the rules in Rust, a
//! conflict costs one more round trip, and conflicts are bounded by the batching: slots are
//! taken about 16 at a time, outcomes are reported with the next call, and an answer that
//! changes nothing (a probe not due yet) is read, never written.
//!
//! # Time
//!
//! Shared times are of the store's clock. A remote store's answers carry its time (Redis's
//! scripts return `TIME`), and each process keeps an offset from its tokio clock to it,
//! measured on every round trip ([`StoreClock`](remote::StoreClock): kept unless a sample
//! disagrees by more than half its round trip plus 1 ms): the processes' clocks never need to
//! agree. An in-process store's clock is tokio's, so a paused clock
//! drives it in tests and simulations.
//!
//! # Cost only while paced
//!
//! A request to an open endpoint reads [`PacingStore::cached`]: no call. What a process knows
//! of an endpoint is read again in the background once it is older than a second (the Redis
//! store's `view_ttl`), and the process's own congestion run reports an outage
//! as soon as it sees one. While paced, a process calls the store for a probe (about twice a
//! second for the whole fleet) or for a batch of slots; while a probe is out, it asks again
//! after as long as the probe has been out, or every lease has been held (from a ramp
//! interval to a probe interval), to hear whether the probe started the ramp.
//!
//! # When the store fails
//!
//! Every call of a remote store has a timeout (Redis's: a few milliseconds). A timeout or a
//! connection error is a [`StoreError`]; the call is still answered, by the process's
//! [fallback](remote::Fallback) (the endpoint's last
//! known state at this process's share of the fleet: rates divided by the peers, a learned
//! rate capped at 1.2 times that share, the probe interval multiplied by the peers — never
//! unlimited; the peers are the fleet the store last counted when no record names any waiting
//! on the endpoint), and [`Applied::fallback`] says why. The store counts it ([`StoreStats`]), logs
//! it once, tries again after 250 ms and then up to every 5 s, and rejoins the fleet's state
//! when the store answers; if the store lost the record meanwhile (Redis restarted empty), the
//! first process back writes its own state, scaled back to the fleet and moved onto the store's
//! clock ([`Fallback::seed`](remote::Fallback::seed)).

mod backend;
mod codec;
mod fallback;
mod memory;
mod protocol;
pub mod remote;
mod run;

pub use backend::{PacingStore, StoreCall};
pub use memory::{InProcessStore, InProcessStoreBuilder};
pub use protocol::{Applied, Event, Lease, Release, Reply, StoreError, StoreStats, View};
