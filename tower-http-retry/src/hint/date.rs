//! HTTP-dates, as RFC 9110 writes them and as some servers write them instead.
//!
//! RFC 9110's three forms (IMF-fixdate, RFC 850, asctime) are read by `httpdate`. A date that is
//! none of them is read in the lenient shape Python's `email.utils` (urllib3's `Retry-After`)
//! reads, `[Wkd,] D Mon YYYY HH:MM:SS ZONE`, as far as it cannot be mistaken for a broken
//! IMF-fixdate:
//!
//! * the weekday may be missing; when it is there, it must be the date's;
//! * the day has one or two digits (`3 Jun`); the month is IMF-fixdate's (`Jun`, in that case);
//!   the year has four digits; the time is `HH:MM:SS`, seconds up to 59;
//! * the zone is `GMT`, `UTC`, `UT` or `Z` (all UTC), or a numeric offset `+hhmm` / `-hhmm`
//!   (`+0200` is two hours ahead of UTC: the instant is two hours earlier than the same digits
//!   in UTC).
//!
//! So `Mon, 3 Jun 2019 12:00:00 UTC` and `3 Jun 2019 14:00:00 +0200` are dates. What
//! `email.utils` reads besides (a zone name such as `EST`, two-digit years, names in lower
//! case, a wrong weekday) is not, nor anything else, and the header is malformed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The instant `text` names, in any of the forms above; `None` if it names none.
pub(crate) fn parse(text: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(text)
        .ok()
        .or_else(|| lenient(text))
}

fn lenient(text: &str) -> Option<SystemTime> {
    let mut words = text.split_ascii_whitespace().peekable();
    let weekday = match words.peek()?.strip_suffix(',') {
        Some(name) => {
            words.next();
            Some(WEEKDAYS.iter().position(|day| *day == name)?)
        }
        None => None,
    };
    let day: u32 = number(words.next()?, 1..=2)?;
    let month = month(words.next()?)?;
    let year: u32 = number(words.next()?, 4..=4)?;
    let mut clock = words.next()?.split(':');
    let hour: u32 = number(clock.next()?, 2..=2)?;
    let minute: u32 = number(clock.next()?, 2..=2)?;
    let second: u32 = number(clock.next()?, 2..=2)?;
    let offset = zone(words.next()?)?;
    if clock.next().is_some() || words.next().is_some() {
        return None;
    }
    if !(1..=days_in(month, year)).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_since_epoch(year, month, day)?;
    // 1970-01-01 was a Thursday.
    if weekday.is_some_and(|weekday| usize::try_from((days + 4) % 7).ok() != Some(weekday)) {
        return None;
    }
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset;
    let seconds = u64::try_from(seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// A number of `digits` ASCII digits.
fn number(word: &str, digits: std::ops::RangeInclusive<usize>) -> Option<u32> {
    if !digits.contains(&word.len()) || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// The weekdays as IMF-fixdate names them, from Sunday.
const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

fn month(word: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let index = MONTHS.iter().position(|name| *name == word)?;
    u32::try_from(index + 1).ok()
}

/// The zone's offset from UTC, in seconds.
fn zone(word: &str) -> Option<i64> {
    if ["GMT", "UTC", "UT", "Z"].contains(&word) {
        return Some(0);
    }
    let (sign, digits) = match word.as_bytes().first()? {
        b'+' => (1, &word[1..]),
        b'-' => (-1, &word[1..]),
        _ => return None,
    };
    let hhmm = number(digits, 4..=4)?;
    let (hours, minutes) = (hhmm / 100, hhmm % 100);
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some(sign * i64::from(hours * 3600 + minutes * 60))
}

fn is_leap(year: u32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to `year`-`month`-`day` (the proleptic Gregorian calendar); `None`
/// before 1970.
fn days_since_epoch(year: u32, month: u32, day: u32) -> Option<i64> {
    if year < 1970 {
        return None;
    }
    let years = (1970..year).map(|y| if is_leap(y) { 366 } else { 365 });
    let months = (1..month).map(|m| days_in(m, year));
    Some(i64::from(
        years.sum::<u32>() + months.sum::<u32>() + day - 1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mon, 03 Jun 2019 12:00:00 GMT.
    const JUNE_3: u64 = 1_559_563_200;

    fn at(seconds: u64) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[test]
    fn rfc_9110_forms_are_read_as_before() {
        assert_eq!(parse("Mon, 03 Jun 2019 12:00:00 GMT"), at(JUNE_3));
        assert_eq!(parse("Monday, 03-Jun-19 12:00:00 GMT"), at(JUNE_3));
        assert_eq!(parse("Mon Jun  3 12:00:00 2019"), at(JUNE_3));
    }

    #[test]
    fn the_forms_urllib3_accepts_are_read_too() {
        assert_eq!(parse("Mon, 3 Jun 2019 12:00:00 UTC"), at(JUNE_3));
        assert_eq!(parse("3 Jun 2019 12:00:00 GMT"), at(JUNE_3));
        assert_eq!(parse("Mon, 3 Jun 2019 12:00:00 Z"), at(JUNE_3));
        assert_eq!(parse("Mon, 03 Jun 2019 14:00:00 +0200"), at(JUNE_3));
        assert_eq!(parse("Mon, 03 Jun 2019 07:00:00 -0500"), at(JUNE_3));
        assert_eq!(parse("Thu, 29 Feb 2024 00:00:00 UTC"), at(1_709_164_800));
    }

    #[test]
    fn anything_else_is_no_date() {
        for text in [
            "Mon, 3 Jun 2019 12:00:00 CET",
            "Mon, 3 Jun 19 12:00:00 GMT",
            "Mon, 3 Jun 2019 12:00 GMT",
            "Mon, 31 Jun 2019 12:00:00 GMT",
            "Fri, 29 Feb 2019 12:00:00 GMT",
            "Mon, 3 Jun 2019 24:00:00 GMT",
            "Mon, 3 Jun 2019 12:00:00 +2400",
            "Mon, 3 Jun 2019 12:00:00 GMT extra",
            "Mon, 3 June 2019 12:00:00 GMT",
            "Tue, 3 Jun 2019 12:00:00 UTC",
            "Mon, 3 jun 2019 12:00:00 UTC",
            "Mon, 3 Jun 2019 12:00:00 utc",
            "Mon, 3 Jun 2019 12:00:60 UTC",
            "1 Jan 1969 00:00:00 GMT",
            "",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }
}
