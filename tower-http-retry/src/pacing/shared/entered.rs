//! The modes an endpoint entered, kept beside its state for telemetry.

use crate::pacing::mode::PacingMode;

/// The modes entered since they were last taken ([`SharedState::take_entered`]), for the
/// process's telemetry and its congestion run. Not part of the state's value: two states that
/// differ only here are equal, and it is never stored.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Entered {
    /// Entries per mode, in [`PacingMode`] order (open, probing, ramping, paused).
    pub(crate) counts: [u8; 4],
}

impl PartialEq for Entered {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Entered {
    pub(crate) fn enter(&mut self, mode: PacingMode) {
        let slot = &mut self.counts[mode_index(mode)];
        *slot = slot.saturating_add(1);
    }

    /// Whether any mode was entered.
    pub(crate) fn any(&self) -> bool {
        self.counts.iter().any(|&n| n > 0)
    }

    /// Each mode entered, as often as it was.
    pub(crate) fn each(self) -> impl Iterator<Item = PacingMode> {
        const MODES: [PacingMode; 4] = [
            PacingMode::Open,
            PacingMode::Probing,
            PacingMode::Ramping,
            PacingMode::Paused,
        ];
        MODES
            .into_iter()
            .zip(self.counts)
            .flat_map(|(mode, n)| std::iter::repeat(mode).take(usize::from(n)))
    }
}

fn mode_index(mode: PacingMode) -> usize {
    match mode {
        PacingMode::Open => 0,
        PacingMode::Probing => 1,
        PacingMode::Ramping => 2,
        PacingMode::Paused => 3,
    }
}
