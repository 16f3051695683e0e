//! [`Tries`]: what a request has sent so far, and what is left of it.

use crate::classify::NotSent;

/// The attempts a request has sent, the free resends of requests turned away unprocessed
/// among them (they do not count against `max_attempts`), and whether a `425 Too Early` was
/// resent already (it is resent once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tries {
    sent: u32,
    refused: u32,
    too_early: bool,
}

impl Tries {
    /// Attempts sent, the free resends included (0 before the first is sent).
    #[inline]
    pub(super) fn sent(&self) -> u32 {
        self.sent
    }

    /// Attempts that count against `max_attempts`.
    #[inline]
    pub(super) fn counted(&self) -> u32 {
        self.sent - self.refused
    }

    /// One more attempt is sent; its number.
    #[inline]
    pub(super) fn send(&mut self) -> u32 {
        self.sent += 1;
        self.sent
    }

    /// Whether another attempt may follow: counted attempts left, or free resends.
    #[inline]
    pub(super) fn any_left(&self, max_attempts: u32, max_refused: u32) -> bool {
        self.counted() < max_attempts || self.refused < max_refused
    }

    /// A request turned away (`kind`) is to be resent: the number of the resend it will be,
    /// from 1 (its pause grows with it).
    #[inline]
    pub(super) fn resend_number(&mut self, kind: NotSent) -> u32 {
        self.too_early |= kind == NotSent::TooEarly;
        self.refused + 1
    }

    /// A free resend is committed.
    #[inline]
    pub(super) fn resent(&mut self) {
        self.refused += 1;
    }

    /// Whether a request turned away (`kind`) has had its free resends: a second `425 Too
    /// Early`, or `max_refused` refusals.
    #[inline]
    pub(super) fn refused_too_often(&self, kind: Option<NotSent>, max_refused: u32) -> bool {
        let again_too_early = kind == Some(NotSent::TooEarly) && self.too_early;
        again_too_early || self.refused >= max_refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_resends_do_not_count_and_a_too_early_is_resent_once() {
        let mut tries = Tries::default();
        assert_eq!((tries.send(), tries.counted()), (1, 1));
        assert_eq!(tries.resend_number(NotSent::Refused), 1);
        tries.resent();
        tries.send();
        assert_eq!((tries.sent(), tries.counted()), (2, 1));
        assert!(!tries.refused_too_often(Some(NotSent::TooEarly), 200));
        assert_eq!(tries.resend_number(NotSent::TooEarly), 2);
        tries.resent();
        assert!(tries.refused_too_often(Some(NotSent::TooEarly), 200));
        assert!(tries.refused_too_often(Some(NotSent::Refused), 2));
        assert!(tries.any_left(2, 2));
        tries.send();
        assert!(!tries.any_left(1, 2));
    }
}
