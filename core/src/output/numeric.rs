//! PostgreSQL's `numeric` on-disk format turned into `numeric_out`'s text,
//! without an fmgr call or a palloc (pure code).
//!
//! Layout (PostgreSQL's numeric.c): after the varlena length word comes a
//! 16-bit header. Short form (`0x8000` set, `0x4000` clear): sign bit
//! `0x2000`, display scale in bits `0x1F80`, weight sign `0x0040` and weight
//! `0x003F`, then the digits. Long form: sign in the top two bits (`0x0000`
//! positive, `0x4000` negative) and display scale in the low 14 bits, then a
//! 16-bit weight, then the digits. Special values have `0xC000` set: NaN
//! `0xC000`, +Infinity `0xD000`, -Infinity `0xF000`. Digits are base 10000,
//! the first one worth 10000^weight.

use crate::text::json::DIGIT_PAIRS;

const NBASE_DIGITS: usize = 4;

/// What [`numeric_text`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumericKind {
    Finite,
    /// NaN, Infinity or -Infinity.
    Special,
}

/// Appends the text `numeric_out` prints for the bytes after the varlena
/// header; `None` (nothing written) if they are not a well-formed numeric
/// (the caller then uses the output function).
pub fn numeric_text(body: &[u8], out: &mut Vec<u8>) -> Option<NumericKind> {
    let header = u16::from_ne_bytes([*body.first()?, *body.get(1)?]);
    let flags = header & 0xC000;
    if flags == 0xC000 {
        out.extend_from_slice(match header & 0xF000 {
            0xC000 => b"NaN".as_slice(),
            0xD000 => b"Infinity".as_slice(),
            0xF000 => b"-Infinity".as_slice(),
            _ => return None,
        });
        return Some(NumericKind::Special);
    }
    let (negative, dscale, weight, digits) = finite(body)?;
    if !write_decimal(negative, weight, dscale, digits, out) {
        return None;
    }
    Some(NumericKind::Finite)
}

/// A finite numeric's sign, display scale, weight and digits; `None` for a
/// special value or bytes that are not a numeric PostgreSQL wrote.
fn finite(body: &[u8]) -> Option<(bool, usize, i32, Digits<'_>)> {
    let header = u16::from_ne_bytes([*body.first()?, *body.get(1)?]);
    let flags = header & 0xC000;
    if flags == 0xC000 {
        return None;
    }
    let (negative, dscale, weight, digits_at) = if flags == 0x8000 {
        let weight_bits = (header & 0x003F) as i32;
        let weight = if header & 0x0040 != 0 {
            weight_bits | !0x003F
        } else {
            weight_bits
        };
        (
            header & 0x2000 != 0,
            ((header & 0x1F80) >> 7) as usize,
            weight,
            2,
        )
    } else {
        let weight = i16::from_ne_bytes([*body.get(2)?, *body.get(3)?]) as i32;
        (flags == 0x4000, (header & 0x3FFF) as usize, weight, 4)
    };
    let raw = body.get(digits_at..)?;
    if raw.len() % 2 != 0 {
        return None;
    }
    // PostgreSQL stores numerics normalized (make_result()): no leading
    // zero digit, and zero with weight 0. Other bytes are not a numeric it
    // wrote, and could print as something that is not a JSON number.
    match Digits(raw).first() {
        None if weight != 0 => return None,
        Some(0) => return None,
        _ => {}
    }
    Some((negative, dscale, weight, Digits(raw)))
}

/// A finite numeric as an integer of its digits at `scale` fraction
/// digits (`None`: at its own display scale), and that scale: what
/// [`numeric_text`]'s text would be with the point taken out and zeros
/// added up to the scale (the Debezium format's decimals), without the
/// text. `None` when the bytes are not a finite numeric this reads, when
/// it has more fraction digits than `scale`, or when the integer does not
/// fit an `i128` (38 digits): the caller then works from the text.
pub fn numeric_unscaled(body: &[u8], scale: Option<usize>) -> Option<(i128, usize)> {
    let (negative, dscale, weight, digits) = finite(body)?;
    let scale = scale.unwrap_or(dscale);
    if dscale > scale
        || !digits
            .0
            .chunks_exact(2)
            .all(|p| (0..10000).contains(&i16::from_ne_bytes([p[0], p[1]])))
    {
        return None;
    }
    // 64-bit arithmetic holds the usual numbers (18 digits) and costs a
    // fraction of 128-bit's.
    let v = match magnitude::<u64>(digits, weight, dscale, scale) {
        Some(v) => v as i128,
        None => i128::try_from(magnitude::<u128>(digits, weight, dscale, scale)?).ok()?,
    };
    Some((if negative { -v } else { v }, scale))
}

/// An unsigned integer type [`magnitude`] accumulates digits in.
trait Magnitude: Copy {
    const ZERO: Self;
    /// `self * mul + add`, `None` on overflow.
    fn mul_add(self, mul: u32, add: u32) -> Option<Self>;
}

impl Magnitude for u64 {
    const ZERO: Self = 0;
    fn mul_add(self, mul: u32, add: u32) -> Option<Self> {
        self.checked_mul(mul as u64)?.checked_add(add as u64)
    }
}

impl Magnitude for u128 {
    const ZERO: Self = 0;
    fn mul_add(self, mul: u32, add: u32) -> Option<Self> {
        self.checked_mul(mul as u128)?.checked_add(add as u128)
    }
}

/// [`numeric_unscaled`]'s integer without its sign, `None` when `M`
/// cannot hold it. The digits are checked to be below 10000.
fn magnitude<M: Magnitude>(
    digits: Digits<'_>,
    weight: i32,
    dscale: usize,
    scale: usize,
) -> Option<M> {
    let digit_at = |i: i32| -> u32 {
        if i >= 0 && (i as usize) < digits.len() {
            digits.get(i as usize) as u32
        } else {
            0
        }
    };
    // The integer groups, then the fraction's up to the display scale (the
    // last one cut to its digits inside it, as the text is).
    let mut v = M::ZERO;
    for g in 0..=weight {
        v = v.mul_add(10000, digit_at(g))?;
    }
    let mut d = weight + 1;
    let mut left = dscale;
    while left >= NBASE_DIGITS {
        v = v.mul_add(10000, digit_at(d))?;
        d += 1;
        left -= NBASE_DIGITS;
    }
    if left > 0 {
        let cut = 10u32.pow((NBASE_DIGITS - left) as u32);
        v = v.mul_add(10u32.pow(left as u32), digit_at(d) / cut)?;
    }
    for _ in dscale..scale {
        v = v.mul_add(10, 0)?;
    }
    Some(v)
}

/// The base-10000 digits, read in place (no copy, no allocation).
#[derive(Clone, Copy)]
struct Digits<'a>(&'a [u8]);

impl Digits<'_> {
    fn len(&self) -> usize {
        self.0.len() / 2
    }
    fn get(&self, i: usize) -> i16 {
        i16::from_ne_bytes([self.0[2 * i], self.0[2 * i + 1]])
    }
    fn first(&self) -> Option<i16> {
        (self.len() > 0).then(|| self.get(0))
    }
}

/// `get_str_from_var()`: base-10000 digits to decimal text with `dscale`
/// digits after the point. False, writing nothing, when a digit is out of
/// range (the bytes are not a numeric).
fn write_decimal(
    negative: bool,
    weight: i32,
    dscale: usize,
    digits: Digits,
    out: &mut Vec<u8>,
) -> bool {
    // Every stored digit is checked, printed or not.
    let valid = |pair: &[u8]| (0..10000).contains(&i16::from_ne_bytes([pair[0], pair[1]]));
    if !digits.0.chunks_exact(2).all(valid) {
        return false;
    }
    let digit_at = |i: i32| -> u16 {
        if i >= 0 && (i as usize) < digits.len() {
            digits.get(i as usize) as u16
        } else {
            0
        }
    };
    let integer_groups = weight.max(0) as usize + 1;
    out.reserve(2 + integer_groups * NBASE_DIGITS + dscale + NBASE_DIGITS);
    if negative {
        out.push(b'-');
    }
    let mut d: i32;
    if weight < 0 {
        d = weight + 1;
        out.push(b'0');
    } else {
        // The first digit group prints without leading zeros.
        push_first_group(out, digit_at(0));
        d = 1;
        while d <= weight {
            push_group(out, digit_at(d));
            d += 1;
        }
    }
    if dscale > 0 {
        out.push(b'.');
        let end = out.len() + dscale;
        let mut written = 0;
        while written < dscale {
            push_group(out, digit_at(d));
            d += 1;
            written += NBASE_DIGITS;
        }
        out.truncate(end);
    }
    true
}

/// A digit group (< 10000) without leading zeros.
fn push_first_group(out: &mut Vec<u8>, dig: u16) {
    let digit = |v: u16| b'0' + (v % 10) as u8;
    match dig {
        0..=9 => out.push(digit(dig)),
        10..=99 => out.extend_from_slice(&DIGIT_PAIRS[dig as usize]),
        100..=999 => {
            out.push(digit(dig / 100));
            out.extend_from_slice(&DIGIT_PAIRS[(dig % 100) as usize]);
        }
        _ => push_group(out, dig),
    }
}

/// A digit group (< 10000) as four digits: two pairs from the table put
/// together in a register and written with one store (four bytes stored
/// one by one and copied as a word would stall the copy's load).
fn push_group(out: &mut Vec<u8>, dig: u16) {
    let pair = |v: u16| u16::from_le_bytes(DIGIT_PAIRS[(v % 100) as usize]) as u32;
    let digits = pair(dig / 100) | pair(dig) << 16;
    out.extend_from_slice(&digits.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(negative: bool, dscale: u16, weight: i16, digits: &[i16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((if negative { 0x4000 } else { 0 }) | dscale).to_ne_bytes());
        b.extend_from_slice(&weight.to_ne_bytes());
        for d in digits {
            b.extend_from_slice(&d.to_ne_bytes());
        }
        b
    }

    fn short(negative: bool, dscale: u16, weight: i16, digits: &[i16]) -> Vec<u8> {
        let mut header = 0x8000u16 | (dscale << 7);
        if negative {
            header |= 0x2000;
        }
        if weight < 0 {
            header |= 0x0040 | ((weight as u16) & 0x003F);
        } else {
            header |= weight as u16;
        }
        let mut b = header.to_ne_bytes().to_vec();
        for d in digits {
            b.extend_from_slice(&d.to_ne_bytes());
        }
        b
    }

    /// The text's digits with the point taken out, zeros added up to
    /// `scale` (or its own fraction digits).
    fn unscaled_from_text(body: &[u8], scale: Option<usize>) -> Option<(i128, usize)> {
        let mut t = Vec::new();
        numeric_text(body, &mut t)?;
        let t = String::from_utf8(t).ok()?;
        let (int, frac) = t.split_once('.').unwrap_or((&t, ""));
        let scale = scale.unwrap_or(frac.len());
        if frac.len() > scale || t == "NaN" || t.ends_with("Infinity") {
            return None;
        }
        let digits = format!("{int}{frac}{}", "0".repeat(scale - frac.len()));
        Some((digits.parse::<i128>().ok()?, scale))
    }

    #[test]
    fn unscaled_is_the_texts_digits() {
        type Case = (Vec<u8>, Option<usize>, Option<(i128, usize)>);
        let cases: &[Case] = &[
            (long(false, 2, 0, &[12, 3400]), Some(2), Some((1234, 2))),
            (long(false, 2, 0, &[12, 3400]), Some(4), Some((123400, 4))),
            (long(false, 2, 0, &[12, 3400]), Some(1), None),
            (long(true, 5, -1, &[1000]), None, Some((-10000, 5))),
            (short(false, 0, 1, &[1, 2345]), None, Some((12345, 0))),
            (long(false, 0, 0, &[]), None, Some((0, 0))),
            // Digits past the display scale are cut, as the text cuts them.
            (long(false, 1, 0, &[1, 2999]), None, Some((12, 1))),
            // 40 digits: no i128.
            (long(false, 0, 9, &[9999; 10]), None, None),
            // Specials and garbage.
            (0xC000u16.to_ne_bytes().to_vec(), None, None),
            (long(false, 0, 0, &[0, 1]), None, None),
            (long(false, 0, 0, &[10000]), None, None),
        ];
        for (body, scale, want) in cases {
            assert_eq!(
                numeric_unscaled(body, *scale),
                *want,
                "{body:?} at {scale:?}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5_000))]

        /// Whatever the digits, weight, scales and sign: the text's digits
        /// whenever an i128 holds them.
        #[test]
        fn unscaled_agrees_with_the_text(
            negative in proptest::prelude::any::<bool>(),
            dscale in 0u16..40,
            weight in -12i16..12,
            digits in proptest::collection::vec(0i16..10000, 0..12),
            scale in proptest::option::of(0usize..45),
            form_short in proptest::prelude::any::<bool>(),
        ) {
            let body = if form_short && dscale < 64 && (-64..64).contains(&weight) {
                short(negative, dscale, weight, &digits)
            } else {
                long(negative, dscale, weight, &digits)
            };
            let fast = numeric_unscaled(&body, scale);
            if let Some(v) = fast {
                proptest::prop_assert_eq!(Some(v), unscaled_from_text(&body, scale));
            } else if let Some((v, s)) = unscaled_from_text(&body, scale) {
                // Only a value beyond 38 digits may miss the fast path.
                proptest::prop_assert!(v.unsigned_abs() > 10u128.pow(37) || s > 38, "{} at {}", v, s);
            }
        }
    }

    fn text(body: &[u8]) -> String {
        let mut out = Vec::new();
        numeric_text(body, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn prints_like_numeric_out() {
        // 0 (no digits), 0.00, 1.50, -12345.6789, 0.0001, 10000, 1e-8 scale 10
        assert_eq!(text(&short(false, 0, 0, &[])), "0");
        assert_eq!(text(&short(false, 2, 0, &[])), "0.00");
        assert_eq!(text(&short(false, 2, 0, &[1, 5000])), "1.50");
        assert_eq!(text(&short(true, 4, 1, &[1, 2345, 6789])), "-12345.6789");
        assert_eq!(text(&short(false, 4, -1, &[1])), "0.0001");
        assert_eq!(text(&short(false, 0, 1, &[1])), "10000");
        // Leading groups of every width.
        assert_eq!(text(&short(false, 0, 0, &[7])), "7");
        assert_eq!(text(&short(false, 0, 0, &[42])), "42");
        assert_eq!(text(&short(false, 0, 0, &[999])), "999");
        assert_eq!(text(&short(false, 0, 0, &[1000])), "1000");
        assert_eq!(text(&short(true, 1, 1, &[42, 7, 5000])), "-420007.5");
        assert_eq!(text(&short(false, 10, -2, &[100])), "0.0000010000");
        assert_eq!(text(&short(false, 10, -2, &[1])), "0.0000000100");
        assert_eq!(
            text(&long(
                false,
                10,
                7,
                &[1234, 5678, 9012, 3456, 7890, 1234, 5678, 9012, 3456, 7890, 0]
            )),
            "12345678901234567890123456789012.3456789000"
        );
        assert_eq!(text(&long(true, 0, 2, &[42])), "-4200000000");
        // Display scale beyond the stored digits pads with zeros; a scale
        // that is not a multiple of 4 cuts the last group.
        assert_eq!(text(&long(false, 6, 0, &[3, 1415])), "3.141500");
        assert_eq!(text(&long(false, 3, 0, &[3, 1415])), "3.141");
    }

    #[test]
    fn special_values_and_garbage() {
        assert_eq!(text(&0xC000u16.to_ne_bytes()), "NaN");
        assert_eq!(text(&0xD000u16.to_ne_bytes()), "Infinity");
        assert_eq!(text(&0xF000u16.to_ne_bytes()), "-Infinity");
        let mut out = Vec::new();
        assert!(numeric_text(&[], &mut out).is_none());
        assert!(numeric_text(&long(false, 0, 0, &[10000]), &mut out).is_none());
        assert!(numeric_text(&[0, 0, 0], &mut out).is_none());
        // Not normalized as PostgreSQL stores numerics: it would print
        // leading zeros, which are not a JSON number.
        assert!(numeric_text(&long(false, 0, 2, &[0, 5]), &mut out).is_none());
        assert!(numeric_text(&long(false, 0, 8, &[]), &mut out).is_none());
        assert!(numeric_text(&short(false, 2, -1, &[]), &mut out).is_none());
        assert!(out.is_empty());
    }
}
