//! `timestamp` / `timestamptz` text as PostgreSQL prints it with
//! `DateStyle = ISO` (and, for timestamptz, a UTC session time zone),
//! without an fmgr call (pure code). The caller checks those settings and
//! otherwise uses the output functions.

use crate::text::json::DIGIT_PAIRS;

const USECS_PER_DAY: i64 = 86_400_000_000;
const USECS_PER_HOUR: i64 = 3_600_000_000;
const USECS_PER_MINUTE: i64 = 60_000_000;
const USECS_PER_SEC: i64 = 1_000_000;
/// Julian day of 2000-01-01, PostgreSQL's epoch.
const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;

/// PostgreSQL's `j2date()`.
fn j2date(jd: i64) -> (i64, u32, u32) {
    let mut julian = (jd as u64).wrapping_add(32044) as u32 as u64;
    let mut quad = julian / 146_097;
    let extra = (julian - quad * 146_097) * 4 + 3;
    julian += 60 + quad * 3 + extra / 146_097;
    quad = julian / 1461;
    julian -= quad * 1461;
    let mut y = julian * 4 / 1461;
    julian = if y != 0 {
        (julian + 305) % 365
    } else {
        (julian + 306) % 366
    } + 123;
    y += quad * 4;
    let year = y as i64 - 4800;
    let quad = julian * 2141 / 65536;
    let day = julian - 7834 * quad / 256;
    let month = (quad + 10) % 12 + 1;
    (year, month as u32, day as u32)
}

/// The text of one timestamp, written straight into the output (at most
/// 35 bytes: a 7-digit year, `.ffffff`, `+00` and ` BC`). Not built on the
/// stack and copied: a copy's wide loads of the bytes just stored one by
/// one cannot be forwarded from the stores and stall.
struct Text<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Text<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        out.reserve(40);
        Text { out }
    }

    fn push(&mut self, b: u8) {
        self.out.push(b);
    }

    fn push_slice(&mut self, s: &[u8]) {
        self.out.extend_from_slice(s);
    }

    /// `YYYY-MM-DD<sep>hh:mm:ss` (a year below 10000, each other field
    /// below 100): every position is known and the digits come in pairs
    /// from a table, so the 19 bytes are put together in three registers
    /// and written with three stores.
    #[inline(always)]
    fn date_time(&mut self, year: u32, [month, day, hour, minute, second]: [u32; 5], sep: u8) {
        let pair = |v: u32| u16::from_le_bytes(DIGIT_PAIRS[(v % 100) as usize]) as u64;
        let byte = |b: u8| b as u64;
        let date = pair(year / 100)
            | pair(year) << 16
            | byte(b'-') << 32
            | pair(month) << 40
            | byte(b'-') << 56;
        let time =
            pair(day) | byte(sep) << 16 | pair(hour) << 24 | byte(b':') << 40 | pair(minute) << 48;
        let seconds = byte(b':') | pair(second) << 8;
        self.out.extend_from_slice(&date.to_le_bytes());
        self.out.extend_from_slice(&time.to_le_bytes());
        self.out.extend_from_slice(&seconds.to_le_bytes()[..3]);
    }

    /// `-MM-DD<sep>hh:mm:ss` after a year of any length.
    fn rest_of_date_time(&mut self, [month, day, hour, minute, second]: [u32; 5], sep: u8) {
        self.push(b'-');
        self.two(month);
        self.push(b'-');
        self.two(day);
        self.push(sep);
        self.two(hour);
        self.push(b':');
        self.two(minute);
        self.push(b':');
        self.two(second);
    }

    /// A fraction of a second (microseconds) as six digits without the
    /// trailing zeros (AppendSeconds); nothing for a whole second.
    fn fraction(&mut self, fsec: u32) {
        if fsec == 0 {
            return;
        }
        self.push(b'.');
        let mut frac = fsec;
        let mut digits = 6;
        while frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        let start = self.out.len();
        self.out.resize(start + digits, b'0');
        for d in self.out[start..].iter_mut().rev() {
            *d = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
    }

    /// Four digits (`v` < 10000).
    fn four(&mut self, v: u32) {
        let d = |v: u32| b'0' + (v % 10) as u8;
        self.push_slice(&[d(v / 1000), d(v / 100), d(v / 10), d(v)]);
    }

    /// Two digits (`v` < 100).
    fn two(&mut self, v: u32) {
        self.push(b'0' + (v / 10) as u8);
        self.push(b'0' + (v % 10) as u8);
    }

    /// `v` in decimal, zero-padded to at least four digits (`v` < 10^10).
    fn year(&mut self, mut v: u64) {
        let mut digits = [b'0'; 10];
        let mut start = digits.len();
        while v > 0 {
            start -= 1;
            digits[start] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        self.push_slice(&digits[start.min(digits.len() - 4)..]);
    }
}

/// A finite timestamp's fields: `year` astronomical (0 is 1 BC), then
/// month, day, hour, minute and second, and `fsec` the microseconds.
struct Fields {
    year: i64,
    month_to_second: [u32; 5],
    fsec: u32,
}

/// What both timestamp writers below share: an infinity is written as
/// PostgreSQL spells it, a finite timestamp (microseconds since
/// 2000-01-01) is split into its fields for `finite` to write, and one
/// outside the dates the fields are computed for writes nothing (false).
#[inline(always)]
fn write_timestamp(out: &mut Vec<u8>, ts: i64, finite: impl FnOnce(&mut Text, Fields)) -> bool {
    match ts {
        i64::MIN => out.extend_from_slice(b"-infinity"),
        i64::MAX => out.extend_from_slice(b"infinity"),
        _ => {
            let date = ts.div_euclid(USECS_PER_DAY) + POSTGRES_EPOCH_JDATE;
            let time = ts.rem_euclid(USECS_PER_DAY);
            if date < 0 || date > i32::MAX as i64 {
                return false;
            }
            let (year, month, day) = j2date(date);
            let fields = Fields {
                year,
                month_to_second: [
                    month,
                    day,
                    (time / USECS_PER_HOUR) as u32,
                    (time % USECS_PER_HOUR / USECS_PER_MINUTE) as u32,
                    (time % USECS_PER_MINUTE / USECS_PER_SEC) as u32,
                ],
                fsec: (time % USECS_PER_SEC) as u32,
            };
            finite(&mut Text::new(out), fields);
        }
    }
    true
}

/// Appends the ISO text of a timestamp (microseconds since 2000-01-01);
/// `utc_offset` adds timestamptz's `+00`. Returns false (writing nothing)
/// for values outside the range this handles, so the caller can fall back.
pub fn push_iso_timestamp(out: &mut Vec<u8>, ts: i64, utc_offset: bool) -> bool {
    write_timestamp(out, ts, |text, fields| {
        let Fields {
            year,
            month_to_second,
            fsec,
        } = fields;
        let display_year = if year > 0 { year } else { -(year - 1) };
        if (1000..=9999).contains(&display_year) {
            // The usual four-digit year: every position is known, no checks.
            text.date_time(display_year as u32, month_to_second, b' ');
        } else {
            text.year(display_year as u64);
            text.rest_of_date_time(month_to_second, b' ');
        }
        text.fraction(fsec);
        if utc_offset {
            text.push_slice(b"+00");
        }
        if year <= 0 {
            text.push_slice(b" BC");
        }
    })
}

/// Appends an astronomical year as ISO 8601 writes it: four digits for
/// 0000-9999 (0000 is 1 BC), otherwise a sign and six digits (ISO 8601's
/// expanded years, as ECMAScript writes them: `-004713`, `+012345`).
fn push_iso8601_year(text: &mut Text, year: i64) {
    if (0..=9999).contains(&year) {
        text.four(year as u32);
        return;
    }
    text.push(if year < 0 { b'-' } else { b'+' });
    let mut digits = [b'0'; 6];
    let mut v = year.unsigned_abs();
    for d in digits.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    if v > 0 {
        // More than six digits: dates reach 5874897.
        text.year(year.unsigned_abs());
    } else {
        text.push_slice(&digits);
    }
}

fn push_iso8601_ymd(text: &mut Text, jd: i64) {
    let (year, month, day) = j2date(jd);
    push_iso8601_year(text, year);
    text.push(b'-');
    text.two(month);
    text.push(b'-');
    text.two(day);
}

/// Appends a `timestamp` (`utc` false) or `timestamptz` (`utc` true: the
/// instant in UTC with `Z`) as ISO 8601, whatever DateStyle and TimeZone
/// are: `2026-12-02T11:12:50.120197` (fraction without trailing zeros,
/// none for whole seconds), BC years as astronomical years
/// (`-000043-03-15T00:00:00`: 44 BC), and the infinities as PostgreSQL
/// spells them (`infinity`, `-infinity`). No quotes. Returns false,
/// writing nothing, for values outside PostgreSQL's range.
pub fn push_iso8601_timestamp(out: &mut Vec<u8>, ts: i64, utc: bool) -> bool {
    write_timestamp(out, ts, |text, fields| {
        let Fields {
            year,
            month_to_second,
            fsec,
        } = fields;
        if (0..=9999).contains(&year) {
            // The usual four-digit year: every position is known.
            text.date_time(year as u32, month_to_second, b'T');
        } else {
            push_iso8601_year(text, year);
            text.rest_of_date_time(month_to_second, b'T');
        }
        text.fraction(fsec);
        if utc {
            text.push(b'Z');
        }
    })
}

/// Appends a `date` (days since 2000-01-01) as ISO 8601 (`2026-12-02`,
/// BC as astronomical years, the infinities as `infinity`/`-infinity`).
/// No quotes. Returns false, writing nothing, outside PostgreSQL's range.
pub fn push_iso8601_date(out: &mut Vec<u8>, days: i32) -> bool {
    match days {
        i32::MIN => {
            out.extend_from_slice(b"-infinity");
            return true;
        }
        i32::MAX => {
            out.extend_from_slice(b"infinity");
            return true;
        }
        _ => {}
    }
    let jd = days as i64 + POSTGRES_EPOCH_JDATE;
    if jd < 0 {
        return false;
    }
    let mut text = Text::new(out);
    push_iso8601_ymd(&mut text, jd);
    true
}

/// Appends an `interval` (months, days, microseconds, as stored) as an
/// ISO 8601 duration, exactly what PostgreSQL prints with IntervalStyle
/// `iso_8601` (whatever the session's style): `P1Y2M3DT4H5M6.5S`, each
/// field with its own sign (`P-1DT-2H-3M-4S`), zero fields left out,
/// `PT0S` for zero. PostgreSQL 17's infinite intervals are `infinity` and
/// `-infinity`. No quotes.
pub fn push_iso8601_interval(out: &mut Vec<u8>, months: i32, days: i32, micros: i64) {
    if (months, days, micros) == (i32::MAX, i32::MAX, i64::MAX) {
        out.extend_from_slice(b"infinity");
        return;
    }
    if (months, days, micros) == (i32::MIN, i32::MIN, i64::MIN) {
        out.extend_from_slice(b"-infinity");
        return;
    }
    // interval2itm: C's truncating division, every field keeps its sign.
    let (years, months) = (months / 12, months % 12);
    let hours = micros / 3_600_000_000;
    let rest = micros % 3_600_000_000;
    let (minutes, rest) = (rest / 60_000_000, rest % 60_000_000);
    let (seconds, fraction) = (rest / 1_000_000, rest % 1_000_000);
    if (years, months, days, hours, minutes, seconds, fraction) == (0, 0, 0, 0, 0, 0, 0) {
        out.extend_from_slice(b"PT0S");
        return;
    }
    let part = |out: &mut Vec<u8>, value: i64, unit: u8| {
        if value != 0 {
            out.extend_from_slice(value.to_string().as_bytes());
            out.push(unit);
        }
    };
    out.push(b'P');
    part(out, years as i64, b'Y');
    part(out, months as i64, b'M');
    part(out, days as i64, b'D');
    if hours != 0 || minutes != 0 || seconds != 0 || fraction != 0 {
        out.push(b'T');
    }
    part(out, hours, b'H');
    part(out, minutes, b'M');
    if seconds != 0 || fraction != 0 {
        if seconds < 0 || fraction < 0 {
            out.push(b'-');
        }
        out.extend_from_slice(seconds.unsigned_abs().to_string().as_bytes());
        if fraction != 0 {
            let digits = format!("{:06}", fraction.unsigned_abs());
            out.push(b'.');
            out.extend_from_slice(digits.trim_end_matches('0').as_bytes());
        }
        out.push(b'S');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn iso(ts: i64, tz: bool) -> String {
        let mut out = Vec::new();
        assert!(push_iso_timestamp(&mut out, ts, tz));
        String::from_utf8(out).unwrap()
    }

    fn iso8601(ts: i64, utc: bool) -> String {
        let mut out = Vec::new();
        assert!(push_iso8601_timestamp(&mut out, ts, utc));
        String::from_utf8(out).unwrap()
    }

    fn iso8601_date(days: i32) -> String {
        let mut out = Vec::new();
        assert!(push_iso8601_date(&mut out, days));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn iso8601_timestamps_dates_and_bc() {
        assert_eq!(iso8601(0, true), "2000-01-01T00:00:00Z");
        assert_eq!(iso8601(0, false), "2000-01-01T00:00:00");
        let t = (9497 * 86_400 + 12 * 3600) * 1_000_000 + 500_000;
        assert_eq!(iso8601(t, true), "2026-01-01T12:00:00.5Z");
        assert_eq!(iso8601(t + 1, false), "2026-01-01T12:00:00.500001");
        assert_eq!(iso8601(-1, true), "1999-12-31T23:59:59.999999Z");
        assert_eq!(iso8601(i64::MAX, true), "infinity");
        assert_eq!(iso8601(i64::MIN, false), "-infinity");
        // 4714-11-24 BC is astronomical year -4713.
        assert_eq!(
            iso8601(-POSTGRES_EPOCH_JDATE * USECS_PER_DAY, false),
            "-004713-11-24T00:00:00"
        );
        // 0001-01-01 BC is year 0000; 0002 BC is -000001.
        assert_eq!(
            iso8601(-730_485 * USECS_PER_DAY, true),
            "0000-01-01T00:00:00Z"
        );
        assert_eq!(iso8601_date(-730_485), "0000-01-01");
        assert_eq!(iso8601_date(-730_485 - 365), "-000001-01-01");
        // '0044-03-15 BC'::date - '2000-01-01'::date = -746_117 (proleptic Gregorian).
        assert_eq!(iso8601_date(-746_117), "-000043-03-15");
        assert_eq!(iso8601_date(3_778_591), "+012345-06-07");
        assert_eq!(iso8601_date(0), "2000-01-01");
        assert_eq!(iso8601_date(9_467), "2025-12-02");
        assert_eq!(iso8601_date(i32::MAX), "infinity");
        assert_eq!(iso8601_date(i32::MIN), "-infinity");
        let mut out = Vec::new();
        assert!(!push_iso8601_date(&mut out, -3_000_000));
        assert!(out.is_empty());
    }

    #[test]
    fn formats_like_timestamp_out_in_iso() {
        assert_eq!(iso(0, true), "2000-01-01 00:00:00+00");
        assert_eq!(iso(0, false), "2000-01-01 00:00:00");
        // 2026-01-01 12:00:00.5 UTC
        let t = (9497 * 86_400 + 12 * 3600) * 1_000_000 + 500_000;
        assert_eq!(iso(t, true), "2026-01-01 12:00:00.5+00");
        assert_eq!(iso(t + 1, true), "2026-01-01 12:00:00.500001+00");
        // Before the epoch: 1999-12-31 23:59:59.999999
        assert_eq!(iso(-1, false), "1999-12-31 23:59:59.999999");
        // Leap day.
        assert_eq!(iso(59 * 86_400 * 1_000_000, false), "2000-02-29 00:00:00");
        assert_eq!(iso(i64::MAX, true), "infinity");
        assert_eq!(iso(i64::MIN, true), "-infinity");
        // 4713-11-24 BC (Julian day 0), the earliest PostgreSQL accepts.
        assert_eq!(
            iso(-POSTGRES_EPOCH_JDATE * USECS_PER_DAY, false),
            "4714-11-24 00:00:00 BC"
        );
        // Year 1 BC is PostgreSQL's year 0.
        assert_eq!(
            iso(-730_485 * USECS_PER_DAY, false),
            "0001-01-01 00:00:00 BC"
        );
        // Five-digit years: 12345-06-07 08:09:10.12.
        // ('12345-06-07'::date - '2000-01-01'::date = 3778591 in PostgreSQL.)
        let t = 3_778_591 * USECS_PER_DAY + (8 * 3600 + 9 * 60 + 10) * USECS_PER_SEC + 120_000;
        assert_eq!(iso(t, true), "12345-06-07 08:09:10.12+00");
    }

    #[test]
    fn before_julian_day_0_both_writers_write_nothing() {
        // The microsecond before 4714-11-24 BC: outside what the fields
        // are computed for, left to the output function.
        let ts = -POSTGRES_EPOCH_JDATE * USECS_PER_DAY - 1;
        let mut out = b"kept".to_vec();
        assert!(!push_iso_timestamp(&mut out, ts, false));
        assert!(!push_iso8601_timestamp(&mut out, ts, true));
        assert_eq!(out, b"kept");
    }

    /// `time` (microseconds into a day), cut to its whole second when
    /// `whole` (so that whole seconds are drawn often).
    fn whole_if(time: i64, whole: bool) -> i64 {
        if whole {
            time / USECS_PER_SEC * USECS_PER_SEC
        } else {
            time
        }
    }

    /// `hh:mm:ss` and the fraction without its trailing zeros, as a plain
    /// formatter writes a time of day (microseconds into the day).
    fn plain_time(time: i64) -> String {
        let mut text = format!(
            "{:02}:{:02}:{:02}",
            time / USECS_PER_HOUR,
            time % USECS_PER_HOUR / USECS_PER_MINUTE,
            time % USECS_PER_MINUTE / USECS_PER_SEC
        );
        if time % USECS_PER_SEC != 0 {
            let frac = format!(".{:06}", time % USECS_PER_SEC);
            text.push_str(frac.trim_end_matches('0'));
        }
        text
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn random_timestamps_match_a_plain_formatter(
            // From 4714 BC to about 285000 AD (the microseconds fit an i64).
            days in (0i64..106_000_000).prop_map(|d| d - POSTGRES_EPOCH_JDATE),
            time in 0..USECS_PER_DAY,
            whole_seconds in proptest::bool::weighted(1.0 / 3.0),
        ) {
            let time = whole_if(time, whole_seconds);
            let (year, month, day) = j2date(days + POSTGRES_EPOCH_JDATE);
            let mut want = format!(
                "{:04}-{month:02}-{day:02} {}",
                if year > 0 { year } else { 1 - year },
                plain_time(time)
            );
            want.push_str("+00");
            if year <= 0 {
                want.push_str(" BC");
            }
            prop_assert_eq!(iso(days * USECS_PER_DAY + time, true), want);
        }

        /// ISO 8601 over the same range: astronomical years, four digits
        /// from 0000 to 9999, a sign and at least six digits otherwise.
        #[test]
        fn random_iso8601_timestamps_match_a_plain_formatter(
            days in (0i64..106_000_000).prop_map(|d| d - POSTGRES_EPOCH_JDATE),
            time in 0..USECS_PER_DAY,
            whole_seconds in proptest::bool::weighted(1.0 / 3.0),
            utc in any::<bool>(),
        ) {
            let time = whole_if(time, whole_seconds);
            let (year, month, day) = j2date(days + POSTGRES_EPOCH_JDATE);
            let year = if (0..=9999).contains(&year) {
                format!("{year:04}")
            } else {
                format!("{year:+07}")
            };
            let mut want = format!("{year}-{month:02}-{day:02}T{}", plain_time(time));
            if utc {
                want.push('Z');
            }
            prop_assert_eq!(iso8601(days * USECS_PER_DAY + time, utc), want);
        }
    }

    fn interval(months: i32, days: i32, micros: i64) -> String {
        let mut out = Vec::new();
        push_iso8601_interval(&mut out, months, days, micros);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn intervals_are_iso8601_durations() {
        let s = 1_000_000i64;
        assert_eq!(interval(0, 0, 0), "PT0S");
        // The '-1 days -02:03:04'.
        assert_eq!(
            interval(0, -1, -(2 * 3600 + 3 * 60 + 4) * s),
            "P-1DT-2H-3M-4S"
        );
        assert_eq!(
            interval(14, 3, (4 * 3600 + 5 * 60 + 6) * s + 500_000),
            "P1Y2MT4H5M6.5S".replace("MT", "M3DT")
        );
        assert_eq!(interval(-14, 0, 0), "P-1Y-2M");
        assert_eq!(interval(12, 0, 0), "P1Y");
        assert_eq!(interval(0, 0, -1_500_000), "PT-1.5S");
        assert_eq!(interval(0, 0, -500_000), "PT-0.5S");
        assert_eq!(interval(0, 0, 1), "PT0.000001S");
        assert_eq!(interval(0, 0, 60 * s), "PT1M");
        assert_eq!(interval(0, 1, -s), "P1DT-1S");
        assert_eq!(interval(i32::MAX, i32::MAX, i64::MAX), "infinity");
        assert_eq!(interval(i32::MIN, i32::MIN, i64::MIN), "-infinity");
        // The extremes of finite intervals.
        assert_eq!(
            interval(i32::MIN, i32::MIN, i64::MIN + 1),
            "P-178956970Y-8M-2147483648DT-2562047788H-54.775807S"
        );
        assert_eq!(
            interval(i32::MAX, 0, i64::MAX - 1),
            "P178956970Y7MT2562047788H54.775806S"
        );
    }
}
