//! The shared state as bytes: what a remote store keeps in the record's `s` field. A fixed,
//! little-endian layout behind a format byte, so that a record written by another version of the
//! crate is recognised (and refused) instead of misread. Empty bytes are an absent record: an
//! open endpoint. Times are nanoseconds of Redis `TIME`.
//!
//! ```text
//! u8 format (2) · mode · u64 next_probe, next_lease, last_slot, demand_until, last_demand,
//! probes, slots_at · f64 slots
//! · opt u64 last_success · opt f64 capacity
//! · u8 n, n × (u64 id, holder, expires) leases · u16 n, n × (u64 holder, seen, f64 last, u64 last_at, u32 phase, u8 placed,
//!   u8 idle,
//!   f32 accepted, u64 reported)
//!   peers
//! mode:  u8 0 open | 1 probing | 2 ramping: ramp, u8 hinted, u64 interval_start,
//!        u32 successes, u32 losses, opt u64 idle_since, u64 cut_settles_at, f64 last_accepted
//!        | 3 paused: u64 until, u8 0 | 1 ramp
//! ramp:  u8 0 slow start: f64 rate | 1 cubic: f64 last_max, f64 since_loss_secs
//! opt:   u8 0 | 1 value
//! ```
//!
//! Some 80 bytes plus 24 per lease and 50 per peer: at most 18 to 19 KiB (255 leases and
//! 256 peers, the most the format holds); a fleet of a few processes holding a probe, well under
//! 1 KiB.

use crate::pacing::rate::Ramp;
use crate::pacing::shared::{LeaseEntry, Mode, Peer, SharedState, MAX_PEERS};

const FORMAT: u8 = 2;

/// The bytes of `state`.
pub(crate) fn encode(state: &SharedState) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + 24 * state.leases.len() + 50 * state.peers.len());
    out.push(FORMAT);
    match state.mode {
        Mode::Open => out.push(0),
        Mode::Probing => out.push(1),
        Mode::Ramping {
            ramp,
            hinted,
            interval_start,
            successes,
            losses,
            idle_since,
            cut_settles_at,
            last_accepted,
        } => {
            out.push(2);
            put_ramp(&mut out, ramp);
            out.push(u8::from(hinted));
            out.extend_from_slice(&interval_start.to_le_bytes());
            out.extend_from_slice(&successes.to_le_bytes());
            out.extend_from_slice(&losses.to_le_bytes());
            put_option(&mut out, idle_since.map(u64::to_le_bytes));
            out.extend_from_slice(&cut_settles_at.to_le_bytes());
            out.extend_from_slice(&last_accepted.to_le_bytes());
        }
        Mode::Paused { until, resume } => {
            out.push(3);
            out.extend_from_slice(&until.to_le_bytes());
            match resume {
                None => out.push(0),
                Some(ramp) => {
                    out.push(1);
                    put_ramp(&mut out, ramp);
                }
            }
        }
    }
    for value in [
        state.next_probe,
        state.next_lease,
        state.last_slot,
        state.demand_until,
        state.last_demand,
        state.probes,
        state.slots_at,
    ] {
        out.extend_from_slice(&value.to_le_bytes());
    }
    out.extend_from_slice(&state.slots.to_le_bytes());
    put_option(&mut out, state.last_success.map(u64::to_le_bytes));
    put_option(&mut out, state.capacity.map(f64::to_le_bytes));
    let leases = &state.leases[..state.leases.len().min(usize::from(u8::MAX))];
    out.push(leases.len() as u8);
    for lease in leases {
        for value in [lease.id, lease.holder, lease.expires] {
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
    let peers = &state.peers[..state.peers.len().min(MAX_PEERS)];
    out.extend_from_slice(&(peers.len() as u16).to_le_bytes());
    for peer in peers {
        out.extend_from_slice(&peer.holder.to_le_bytes());
        out.extend_from_slice(&peer.seen.to_le_bytes());
        out.extend_from_slice(&peer.last.to_le_bytes());
        out.extend_from_slice(&peer.last_at.to_le_bytes());
        out.extend_from_slice(&peer.phase.to_le_bytes());
        out.push(u8::from(peer.placed));
        out.push(u8::from(peer.idle));
        out.extend_from_slice(&peer.accepted.to_le_bytes());
        out.extend_from_slice(&peer.reported.to_le_bytes());
    }
    out
}

fn put_option(out: &mut Vec<u8>, value: Option<[u8; 8]>) {
    match value {
        None => out.push(0),
        Some(bytes) => {
            out.push(1);
            out.extend_from_slice(&bytes);
        }
    }
}

fn put_ramp(out: &mut Vec<u8>, ramp: Ramp) {
    match ramp {
        Ramp::SlowStart { rate } => {
            out.push(0);
            out.extend_from_slice(&rate.to_le_bytes());
        }
        Ramp::Cubic {
            last_max,
            since_loss_secs,
        } => {
            out.push(1);
            out.extend_from_slice(&last_max.to_le_bytes());
            out.extend_from_slice(&since_loss_secs.to_le_bytes());
        }
    }
}

/// Why bytes are not a state: the record is damaged or from another format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed;

/// The state in `bytes` (empty: an absent record, an open endpoint).
pub(crate) fn decode(bytes: &[u8]) -> Result<SharedState, Malformed> {
    if bytes.is_empty() {
        return Ok(SharedState::new());
    }
    let mut input = Reader(bytes);
    if input.u8()? != FORMAT {
        return Err(Malformed);
    }
    let mode = match input.u8()? {
        0 => Mode::Open,
        1 => Mode::Probing,
        2 => Mode::Ramping {
            ramp: input.ramp()?,
            hinted: input.flag()?,
            interval_start: input.u64()?,
            successes: input.u32()?,
            losses: input.u32()?,
            idle_since: input.option(Reader::u64)?,
            cut_settles_at: input.u64()?,
            last_accepted: input.f64()?,
        },
        3 => Mode::Paused {
            until: input.u64()?,
            resume: match input.u8()? {
                0 => None,
                1 => Some(input.ramp()?),
                _ => return Err(Malformed),
            },
        },
        _ => return Err(Malformed),
    };
    let mut state = SharedState {
        mode,
        next_probe: input.u64()?,
        next_lease: input.u64()?,
        last_slot: input.u64()?,
        demand_until: input.u64()?,
        last_demand: input.u64()?,
        probes: input.u64()?,
        slots_at: input.u64()?,
        slots: input.f64()?,
        last_success: input.option(Reader::u64)?,
        capacity: input.option(Reader::f64)?,
        ..SharedState::new()
    };
    for _ in 0..input.u8()? {
        state.leases.push(LeaseEntry {
            id: input.u64()?,
            holder: input.u64()?,
            expires: input.u64()?,
        });
    }
    let peers = u16::from_le_bytes(input.take()?);
    if usize::from(peers) > MAX_PEERS {
        return Err(Malformed);
    }
    for _ in 0..peers {
        state.peers.push(Peer {
            holder: input.u64()?,
            seen: input.u64()?,
            last: input.f64()?,
            last_at: input.u64()?,
            phase: input.u32()?,
            placed: input.flag()?,
            idle: input.flag()?,
            accepted: input.f32()?,
            reported: input.u64()?,
        });
    }
    if !input.0.is_empty() {
        return Err(Malformed);
    }
    Ok(state)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let (head, rest) = self.0.split_at_checked(N).ok_or(Malformed)?;
        self.0 = rest;
        head.try_into().map_err(|_| Malformed)
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn f32(&mut self) -> Result<f32, Malformed> {
        let value = f32::from_le_bytes(self.take()?);
        if value.is_finite() {
            Ok(value)
        } else {
            Err(Malformed)
        }
    }

    fn f64(&mut self) -> Result<f64, Malformed> {
        let value = f64::from_le_bytes(self.take()?);
        if value.is_finite() {
            Ok(value)
        } else {
            Err(Malformed)
        }
    }

    fn flag(&mut self) -> Result<bool, Malformed> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed),
        }
    }

    fn option<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, Malformed>,
    ) -> Result<Option<T>, Malformed> {
        if self.flag()? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    fn ramp(&mut self) -> Result<Ramp, Malformed> {
        match self.u8()? {
            0 => Ok(Ramp::SlowStart { rate: self.f64()? }),
            1 => Ok(Ramp::Cubic {
                last_max: self.f64()?,
                since_loss_secs: self.f64()?,
            }),
            _ => Err(Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states() -> Vec<SharedState> {
        let ramp = Ramp::Cubic {
            last_max: 1234.5,
            since_loss_secs: 0.25,
        };
        let modes = [
            Mode::Open,
            Mode::Probing,
            Mode::Ramping {
                ramp: Ramp::SlowStart { rate: 12.0 },
                hinted: true,
                interval_start: 1,
                successes: 2,
                losses: 3,
                idle_since: Some(6),
                cut_settles_at: 4,
                last_accepted: 5.5,
            },
            Mode::Paused {
                until: 99,
                resume: Some(ramp),
            },
            Mode::Paused {
                until: 99,
                resume: None,
            },
        ];
        modes
            .into_iter()
            .map(|mode| SharedState {
                mode,
                next_probe: 10,
                leases: vec![LeaseEntry {
                    id: 1,
                    holder: u64::MAX,
                    expires: 30,
                }],
                next_lease: 2,
                last_slot: 40,
                demand_until: 50,
                last_demand: 52,
                slots: 7.25,
                slots_at: 53,
                last_success: Some(45),
                capacity: Some(1500.0),
                peers: vec![Peer {
                    holder: 3,
                    seen: 60,
                    last: 65.5,
                    last_at: 64,
                    phase: 1 << 31,
                    placed: true,
                    idle: true,
                    accepted: 12.5,
                    reported: 66,
                }],
                probes: 70,
                ..SharedState::new()
            })
            .collect()
    }

    #[test]
    fn every_mode_survives_a_round_trip() {
        for state in states() {
            assert_eq!(decode(&encode(&state)), Ok(state));
        }
        assert_eq!(decode(&[]), Ok(SharedState::new()));
    }

    #[test]
    fn the_fullest_record_the_format_allows_fits_the_documented_bound() {
        let longest = states()
            .into_iter()
            .max_by_key(|state| encode(state).len())
            .unwrap();
        let full = SharedState {
            leases: (0..u64::from(u8::MAX))
                .map(|id| LeaseEntry {
                    id,
                    holder: id,
                    expires: 30,
                })
                .collect(),
            peers: (0..MAX_PEERS as u64)
                .map(|holder| Peer {
                    holder,
                    ..longest.peers[0]
                })
                .collect(),
            ..longest
        };
        let bytes = encode(&full);
        assert_eq!(decode(&bytes), Ok(full));
        // The bound the module's and the fleet guide's docs give.
        assert!(bytes.len() <= 19 * 1024, "{} bytes", bytes.len());
        assert!(
            bytes.len() > 18 * 1024,
            "{} bytes: the docs overstate it",
            bytes.len()
        );
    }

    #[test]
    fn a_truncated_extended_or_foreign_record_is_malformed() {
        let bytes = encode(&states()[2]);
        for len in 1..bytes.len() {
            assert_eq!(decode(&bytes[..len]), Err(Malformed), "{len} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer), Err(Malformed));
        let mut foreign = bytes;
        foreign[0] = FORMAT + 1;
        assert_eq!(decode(&foreign), Err(Malformed));
    }
}
