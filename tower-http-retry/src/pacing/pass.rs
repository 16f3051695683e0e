//! How the head of an endpoint's queue may go ([`Release`]) and, once it goes, how it was let
//! through ([`Pass`]): what the endpoint's state machine answers, the fleet side consumes and
//! the queue hands a request.

use super::clock::Nanos;
use super::store::Lease;
use tokio::time::Instant;

/// How a released request was let through; its outcome is recorded with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// One of the few requests in flight while the endpoint is down, on this lease of its probe
    /// stream.
    Probe(Lease),
    /// Released by the rate (or the endpoint is open), at `released` in the endpoint's shared
    /// time (a process alone's own clock; a fleet's changes with its store's answers, and its
    /// passes' times are not used): a loss of a release made before the rate's last cut
    /// answers the rate before it.
    Paced { released: Nanos },
}

/// Whether the request at the head of the queue may go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    Now(Pass),
    /// Not before this instant.
    At(Instant),
    /// When a probe in flight finishes.
    Blocked,
    /// When the fleet's store answers (`endpoint/fleet.rs`): the head waits for the call it asked for.
    Asked,
}
