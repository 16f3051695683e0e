//! How many slots an authority has now: what its HTTP/2 connections serve before their
//! `GOAWAY`, learned from the answers (which connection gave each) and the rotation refusals.
//! Pure: the unit tests below drive it without a connection.

use std::net::SocketAddr;

/// The slots of an authority nothing is known of yet. Three fits every server that allows four
/// concurrent streams or more, and a server that rotates its connections after three requests
/// or more, so that the first requests to a new authority are neither parked nor refused.
pub(crate) const FIRST_SLOTS: usize = 3;

/// The slots of one authority: at most `most` (the layer's), at first [`FIRST_SLOTS`].
///
/// * A connection whose life saw a rotation refusal (an HTTP/2 `REFUSED_STREAM` or `GOAWAY`)
///   served as many requests as the server allows on one: when the next connection answers,
///   the slots become that count. With more in flight than a fresh connection serves, the rest
///   are turned away and resent.
/// * A connection that served twice the slots with no refusal shows that the server allows
///   more: the slots double (slow start), up to `most`.
/// * An HTTP/1 answer has no streams to fit: the slots are `most`.
///
/// While the slots come from a refusing connection, they are handed out in **batches**: once
/// taken, none is given back until every one of them is. A batch then fits a fresh connection,
/// and the next goes out after its last answer, behind the `GOAWAY` the server sent on
/// receiving the batch's last request. Slots given back one by one would send the next request
/// on the rotating connection as soon as its first answer ended, before that `GOAWAY` arrived,
/// to be turned away: about one resend per connection.
#[derive(Debug)]
pub(crate) struct Learning {
    most: usize,
    slots: usize,
    /// The slots were learned from a refusing connection (and not grown since).
    batches: bool,
    /// The connection answering lately, and the one before it (whose last answers may still
    /// come in after the first of the next one).
    current: Option<Connection>,
    previous: Option<Connection>,
}

/// One connection of the authority, told apart by its local address.
#[derive(Clone, Copy, Debug)]
struct Connection {
    /// `None` while only a refusal was seen (no answer yet named the connection), or when the
    /// client does not say (its connector reports no `HttpInfo`).
    local: Option<SocketAddr>,
    served: usize,
    refused: usize,
}

impl Learning {
    pub(crate) fn new(most: usize) -> Self {
        Self {
            most,
            slots: FIRST_SLOTS.min(most),
            batches: false,
            current: None,
            previous: None,
        }
    }

    /// The slots now.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Whether the slots are handed out in batches (see the type's docs).
    pub(crate) fn batches(&self) -> bool {
        self.batches
    }

    /// A request was answered on an HTTP/2 connection (`http2`) whose local address is `local`.
    pub(crate) fn answered(&mut self, http2: bool, local: Option<SocketAddr>) {
        if !http2 {
            self.slots = self.most;
            self.batches = false;
            return;
        }
        let served = Connection {
            local,
            served: 1,
            refused: 0,
        };
        let same = |connection: &Connection| {
            connection.local.is_none() || local.is_none() || connection.local == local
        };
        match (&mut self.current, &mut self.previous) {
            (None, _) => self.current = Some(served),
            (Some(current), _) if same(current) => {
                current.local = current.local.or(local);
                current.served += 1;
            }
            (Some(_), Some(previous)) if previous.local == local => {
                // A late answer of the connection that ended: it served one more.
                previous.served += 1;
                if previous.refused > 0 {
                    self.slots = self.slots.max(previous.served).min(self.most);
                }
                return;
            }
            (Some(_), _) => {
                let ended = self.current.replace(served);
                if let Some(ended) = ended.filter(|ended| ended.refused > 0) {
                    self.slots = ended.served.clamp(1, self.most);
                    self.batches = true;
                }
                self.previous = ended;
            }
        }
        if let Some(current) = &self.current {
            if current.refused == 0 && current.served >= 2 * self.slots {
                self.slots = (self.slots * 2).min(self.most);
                self.batches = false;
            }
        }
    }

    /// A request was turned away unprocessed by a rotating connection.
    pub(crate) fn refused(&mut self) {
        let current = self.current.get_or_insert(Connection {
            local: None,
            served: 0,
            refused: 0,
        });
        current.refused += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// `learning` answered `served` requests on connection `port`, then refused `refused`.
    fn serve(learning: &mut Learning, port: u16, served: usize, refused: usize) {
        for _ in 0..served {
            learning.answered(true, connection(port));
        }
        for _ in 0..refused {
            learning.refused();
        }
    }

    #[test]
    fn a_new_authority_starts_at_three_slots_or_fewer() {
        assert_eq!(Learning::new(127).slots(), 3);
        assert_eq!(Learning::new(2).slots(), 2);
    }

    #[test]
    fn a_server_rotating_every_three_requests_keeps_three_slots() {
        let mut learning = Learning::new(127);
        // The refusal comes before the first connection's answers are all seen.
        serve(&mut learning, 1, 1, 1);
        serve(&mut learning, 1, 2, 0);
        for port in 2..50 {
            serve(&mut learning, port, 3, usize::from(port % 2 == 0));
            assert_eq!(learning.slots(), 3, "connection {port}");
            assert!(learning.batches());
        }
    }

    #[test]
    fn the_slots_shrink_to_what_a_refusing_connection_served_when_the_next_answers() {
        let mut learning = Learning::new(127);
        serve(&mut learning, 1, 200, 0);
        assert_eq!(
            learning.slots(),
            127,
            "a long connection: slow start to the most"
        );
        serve(&mut learning, 1, 0, 5);
        assert_eq!(
            learning.slots(),
            127,
            "not before the next connection answers"
        );
        serve(&mut learning, 2, 1, 0);
        assert_eq!(
            learning.slots(),
            127,
            "it served 200: the slots are not the limit"
        );

        let mut learning = Learning::new(127);
        serve(&mut learning, 1, 6, 0);
        assert_eq!(learning.slots(), 6);
        serve(&mut learning, 1, 1, 2);
        serve(&mut learning, 2, 1, 0);
        assert_eq!(
            learning.slots(),
            7,
            "the first connection served 7 of the 6 + 3 sent"
        );
    }

    #[test]
    fn a_late_answer_of_the_ended_connection_counts_toward_it() {
        let mut learning = Learning::new(127);
        serve(&mut learning, 1, 2, 1);
        serve(&mut learning, 2, 1, 0);
        assert_eq!(learning.slots(), 2);
        serve(&mut learning, 1, 1, 0);
        assert_eq!(
            learning.slots(),
            3,
            "the ended connection served three after all"
        );
        serve(&mut learning, 2, 1, 0);
        assert_eq!(learning.slots(), 3);
    }

    #[test]
    fn slow_start_doubles_after_twice_the_slots_without_a_refusal() {
        let mut learning = Learning::new(127);
        let mut seen = vec![learning.slots()];
        for _ in 0..400 {
            learning.answered(true, connection(1));
            if seen.last() != Some(&learning.slots()) {
                seen.push(learning.slots());
            }
        }
        assert_eq!(seen, [3, 6, 12, 24, 48, 96, 127]);
        assert!(!learning.batches());
    }

    #[test]
    fn a_connection_that_serves_twice_the_batch_ends_the_batches() {
        let mut learning = Learning::new(127);
        serve(&mut learning, 1, 3, 1);
        serve(&mut learning, 2, 1, 0);
        assert!(learning.batches());
        serve(&mut learning, 2, 5, 0);
        assert_eq!(learning.slots(), 6);
        assert!(!learning.batches(), "the server stopped rotating so soon");
    }

    #[test]
    fn http1_answers_or_a_client_that_names_no_connection_never_hold_the_slots_down() {
        let mut learning = Learning::new(127);
        learning.answered(false, None);
        assert_eq!(learning.slots(), 127);

        let mut learning = Learning::new(20);
        for _ in 0..100 {
            learning.answered(true, None);
        }
        learning.refused();
        learning.answered(true, None);
        assert_eq!(learning.slots(), 20, "one connection as far as it can tell");
    }
}
